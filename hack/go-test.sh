#!/usr/bin/env bash
# go-test.sh runs every Go test package in two lanes at once, one package at
# a time in each. Its arguments are go test's test flags (-count=1,
# -timeout 60m, -run X, -v; after -args, the tests' own flags); build flags
# go in GOFLAGS.
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
# Linking a test binary takes 7 to 20 s here, more than most packages take
# to run, and go test links again on every run. So two builders link the
# binaries (go test -c) ahead of the lanes, in the order they take them and
# at the lowest CPU priority, in the time the lanes leave a core idle; a
# lane runs the binary in its package's directory as go test would, and
# prints go test's line for it. Output streams with each line marked by its
# lane; when a package fails, what failed is said again at the very end,
# where a CI log's tail shows it.
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
# The order the lanes need the binaries in: each lane's first package, lane
# one's other node packages (needed minutes later, but the queue's tail is
# short), then the queue.
builds=("${node_pkgs[0]}" "${queue[0]}" "${node_pkgs[@]:1}" "${queue[@]:1}")
declare -A dir
while read -r p d; do dir[$p]=$d; done < <(go list -f '{{.ImportPath}} {{.Dir}}' "${tested[@]}")

# go test's test flags as the test binary reads them (-count=1 becomes
# -test.count=1); what follows -args is passed as it is.
flags=(-test.paniconexit0)
args=false
for f in "$@"; do
	if $args || [[ $f != -* || $f == -test.* ]]; then
		flags+=("$f")
	elif [[ $f == -args ]]; then
		args=true
	else
		f=${f#-}
		flags+=("-test.${f#-}")
	fi
done

work=$(mktemp -d)
mkdir "$work/bin"
# The commands and images the tests build, built once for every package
# (testenv.sharedBuild).
export FLEEET_TEST_BUILDS="$work/builds"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# take prints the next item of the array named $1, or nothing once every
# item has been taken: each item goes to one taker, whichever lane or
# builder asks first.
take() {
	local -n items=$1
	local i lock
	exec {lock}>"$work/lock"
	flock "$lock"
	i=$(cat "$work/$1.next" 2>/dev/null || echo 0)
	echo $((i + 1)) >"$work/$1.next"
	exec {lock}>&-
	((i < ${#items[@]})) && echo "${items[$i]}"
	return 0
}

# binary is where the test binary of package $1 is linked; $(binary).rc
# holds go test -c's status once it is done, and $(binary).log its output.
binary() { echo "$work/bin/${1//\//_}.test"; }

# builder links test binaries in the order of builds, at the lowest CPU
# priority, while fewer than 8 are linked and not yet run (about 1 GB of
# disk). It links without cgo: kustomize imports Go's plugin package, which
# with cgo makes every binary go through gcc's linker and compress its debug
# sections, twice the time (the release images are built without cgo too). Two builders run, so that the queue's tail of packages that run for
# seconds waits for two links at once, as it did when each lane linked its
# own.
builder() {
	local pkg bin
	while pkg=$(take builds) && [[ -n $pkg ]]; do
		bin=$(binary "$pkg")
		while (($(find "$work/bin" -name '*.test' | wc -l) >= 8)); do sleep 1; done
		CGO_ENABLED=0 nice -n 19 go test -c -o "$bin" "$pkg" >"$bin.log" 2>&1 && echo 0 >"$bin.tmp" || echo 1 >"$bin.tmp"
		mv "$bin.tmp" "$bin.rc"
	done
}

# run runs the tests of one package in lane $1 once its binary is linked,
# its output marked by the lane and kept in the lane's log; a failure is
# recorded, not fatal, so the lane goes on with the queue.
run() {
	local name=$1 pkg=$2 bin start took rc=0
	bin=$(binary "$pkg")
	until [[ -e $bin.rc ]]; do sleep 1; done
	start=$EPOCHREALTIME
	{
		if [[ $(<"$bin.rc") == 0 ]]; then
			(cd "${dir[$pkg]}" && "$bin" "${flags[@]}") || rc=$?
		else
			cat "$bin.log"
			rc=1
		fi
		took=$((${EPOCHREALTIME/./} - ${start/./}))
		took=$(printf '%d.%03ds' $((took / 1000000)) $((took % 1000000 / 1000)))
		if ((rc == 0)); then
			printf 'ok  \t%s\t%s\n' "$pkg" "$took"
		else
			printf 'FAIL\t%s\t%s\n' "$pkg" "$took"
			echo "$pkg" >>"$work/failed"
		fi
	} 2>&1 | sed -u "s/^/[$name] /" | tee -a "$work/$name.log"
	rm -f "$bin"
}

lane() {
	local name=$1 pkg
	if [[ $name == one ]]; then
		for pkg in "${node_pkgs[@]}"; do
			run "$name" "$pkg"
		done
	fi
	while pkg=$(take queue) && [[ -n $pkg ]]; do
		run "$name" "$pkg"
	done
}

builder &
builder &
lane one &
one_pid=$!
lane two &
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
