#!/usr/bin/env bash
# go-test.sh runs every Go test package in two lanes at once, one package at
# a time in each, with the go test flags it is given (GO_TEST_FLAGS).
#
# A heavy package starts apiservers, Flux and nodes of its own and leaves a
# core of the two idle part of the time, so two lanes cut the wall time. The
# three packages that run real nodes (test/e2e, test/charts, test/ct) go one
# after the other in lane one: two of them at once took 900 and 800 s
# instead of 305 and 280. Every other package is taken from one queue, the
# longest first, by lane two from the start and by lane one once the node
# packages are done, so that neither lane idles while the other has a queue;
# a new package is never left out.
#
# go test links each package's test binary again on every run, 4 to 20 s
# here. It links them without cgo, which halves that: kustomize imports Go's
# plugin package, which with cgo sends every binary through gcc's linker and
# compresses its debug sections (the release images are built without cgo
# too); the tests themselves run with the environment they were given, so
# what they build, a tool on first use, is built as it would be otherwise.
# go test's own vet is off: make test runs go vet on every package first.
#
# Output streams with each line marked by its lane; when a package fails,
# what failed is said again at the very end, where a CI log's tail shows it.
set -euo pipefail
cd "$(dirname "$0")/.."

# The packages that run real nodes, the longest first.
nodes=(./test/e2e ./test/charts ./test/ct)
# The rest that take 20 s or more, the longest first (a fresh-clone run's
# figures: 4 to 5 minutes, then 1.5 minutes and down), so that the queue
# ends with packages of seconds and neither lane finishes minutes before the
# other. A package not listed here joins the queue after them.
long=(./internal/manager ./internal/controllers/agent/upstream ./test/adversarial
	./internal/controllers/agent/assemblage ./internal/testenv ./internal/controllers/manager/compiler
	./internal/controllers/manager/module ./internal/release ./internal/fleetctl
	./internal/controllers/manager/remote ./hack/release ./internal/controllers/manager/registration
	./internal/agent ./internal/controllers/manager/inventory ./internal/dashboard ./internal/shard)

mapfile -t node_pkgs < <(go list "${nodes[@]}")
mapfile -t long_pkgs < <(go list "${long[@]}")
mapfile -t tested < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... | sed '/^$/d')
queue=("${long_pkgs[@]}")
for p in "${tested[@]}"; do
	[[ " ${node_pkgs[*]} ${long_pkgs[*]} " == *" $p "* ]] || queue+=("$p")
done

work=$(mktemp -d)
# The commands and images the tests build, built once for every package
# (testenv.sharedBuild).
export FLEEET_TEST_BUILDS="$work/builds"
trap 'rm -rf "$work"' EXIT
echo 0 >"$work/next"

# take prints the next package of the queue, or nothing once it is empty.
take() {
	local i
	exec {lock}>"$work/lock"
	flock "$lock"
	i=$(<"$work/next")
	echo $((i + 1)) >"$work/next"
	exec {lock}>&-
	((i < ${#queue[@]})) && echo "${queue[$i]}"
	return 0
}

# run runs go test on one package in lane $1, its output marked by the lane
# and kept in the lane's log; a failure is recorded, not fatal, so the lane
# goes on with the queue.
run() {
	local name=$1 pkg=$2
	shift 2
	# pipefail keeps go test's status through sed and tee.
	if ! CGO_ENABLED=0 go test -vet=off -exec "env -u CGO_ENABLED" "$@" "$pkg" 2>&1 | sed -u "s/^/[$name] /" | tee -a "$work/$name.log"; then
		echo "$pkg" >>"$work/failed"
	fi
}

lane() {
	local name=$1 pkg
	shift
	if [[ $name == one ]]; then
		for pkg in "${node_pkgs[@]}"; do
			run "$name" "$pkg" "$@"
		done
	fi
	while pkg=$(take) && [[ -n $pkg ]]; do
		run "$name" "$pkg" "$@"
	done
}

lane one "$@" &
one_pid=$!
lane two "$@" &
two_pid=$!
wait "$one_pid" "$two_pid"
if [[ -s $work/failed ]]; then
	# The failed tests first, then the first failure's message with the
	# lines that follow it (a Gomega failure says what it expected and what
	# it got on those), cut short, so that the end of a CI log holds it.
	echo "=== what failed (repeated from above)"
	grep -hE -- '--- FAIL|^\[[a-z]+\] FAIL[[:space:]]' "$work"/*.log | tail -n 8 || true
	grep -hE -A 10 -- 'panic:|test timed out|_test\.go:[0-9]+:' "$work"/*.log | head -n 14 | cut -c 1-400 || true
	exit 1
fi
