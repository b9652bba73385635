# fleeet — every command CI runs goes through this Makefile.
#
#   make setup     install Debian packages the tests need, build the pinned tools
#   make test      everything CI runs: vet, gofmt, verify, Go tests, opa check/test, helm lint
#   make generate  regenerate deepcopy code, CRDs and the CRDs copied into the charts
#   make verify    fail when generated files are stale
#   make bench     benchmarks against real apiservers and Flux; figures go to BENCHMARKS.md

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
export GOTOOLCHAIN := local
export GOFLAGS := -buildvcs=false

# $(call tool,NAME) builds NAME from hack/tools if its cache entry is missing
# and expands to the binary's path.
tool = $(shell hack/tools/build.sh $(1) | cut -d= -f2)/$(1)

GO_TEST_FLAGS ?= -count=1 -timeout 45m
MANAGER_CRDS := modules bootstrapmodules remotes proxyassemblages registrationtokens
AGENT_CRDS := upstreams assemblages

.PHONY: all
all: build

.PHONY: setup
setup: ## Install missing Debian packages and build every pinned tool once.
	hack/setup-debian.sh
	hack/tools/build.sh >/dev/null

.PHONY: build
build: ## Build the three binaries into bin/.
	go build -o bin/ ./cmd/...

.PHONY: generate
generate: ## Regenerate deepcopy code, CRDs and the charts' copies of them.
	$(call tool,controller-gen) object paths=./api/...
	$(call tool,controller-gen) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	rm -f charts/fleet-manager/crds/*.yaml charts/fleet-agent/crds/*.yaml
	mkdir -p charts/fleet-manager/crds charts/fleet-agent/crds
	for k in $(MANAGER_CRDS); do cp config/crd/bases/fleeet.dev_$$k.yaml charts/fleet-manager/crds/; done
	for k in $(AGENT_CRDS); do cp config/crd/bases/fleeet.dev_$$k.yaml charts/fleet-agent/crds/; done

.PHONY: verify
verify: ## Fail when generated files differ from what make generate writes.
	hack/verify.sh

.PHONY: vet
vet:
	go vet ./...

.PHONY: fmt-check
fmt-check:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

.PHONY: go-test
go-test: ## Unit and real-apiserver tests (tools are built on first use).
	go test $(GO_TEST_FLAGS) ./...

.PHONY: opa-test
opa-test: ## Strict check and unit tests of every policy, failing under 90% coverage.
	$(call tool,opa) check --strict --v1-compatible --ignore samples policies/
	$(call tool,opa) test --v1-compatible --ignore samples policies/
	$(call tool,opa) test --v1-compatible --coverage --threshold 90 --ignore samples policies/ > /dev/null

.PHONY: helm-lint
helm-lint:
	$(call tool,helm) lint --strict charts/fleet-manager charts/fleet-agent

.PHONY: test
test: setup vet fmt-check verify go-test opa-test helm-lint ## Everything CI runs.

BENCH_FLAGS ?= -run '^$$' -bench . -benchtime 1x -timeout 60m
.PHONY: bench
bench: setup ## Benchmarks on real components; copy the figures into BENCHMARKS.md.
	go test $(BENCH_FLAGS) ./internal/...
