#!/usr/bin/env bash
# go-test.sh runs every Go test package in two lanes at once, one package at
# a time in each, with the go test flags it is given (GO_TEST_FLAGS).
#
# A heavy package starts apiservers, Flux and nodes of its own and leaves a
# core of the two idle most of the time, so two lanes cut the wall time. The
# three packages that run real nodes (test/e2e, test/charts, test/ct) share
# lane one, one after the other: two of them at once took 900 and 800 s
# instead of 305 and 280. Every other package runs in lane two, beside them,
# so a new package is never left out; go test -p 2 would instead run
# packages in path order and leave test/e2e alone at the end. Output streams
# with each line marked by its lane; when a lane fails, what failed is said
# again at the very end, where a CI log's tail shows it.
set -euo pipefail
cd "$(dirname "$0")/.."

# The packages that run real nodes, the longest first.
one=(./test/e2e ./test/charts ./test/ct)

mapfile -t all < <(go list ./...)
mapfile -t first < <(go list "${one[@]}")
two=()
for p in "${all[@]}"; do
	[[ " ${first[*]} " == *" $p "* ]] || two+=("$p")
done

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

lane() {
	local name=$1
	shift
	# pipefail keeps go test's status through sed and tee.
	go test "$@" 2>&1 | sed -u "s/^/[$name] /" | tee "$logs/$name"
}

lane one "$@" "${first[@]}" &
one_pid=$!
lane two "$@" "${two[@]}" &
two_pid=$!
status=0
wait "$one_pid" || status=1
wait "$two_pid" || status=1
if ((status != 0)); then
	# The failed tests first, then the first failure's message with the
	# lines that follow it (a Gomega failure says what it expected and what
	# it got on those), cut short, so that the end of a CI log holds it.
	echo "=== what failed (repeated from above)"
	grep -hE -- '--- FAIL|^\[[a-z]+\] FAIL[[:space:]]' "$logs"/* | tail -n 8 || true
	grep -hE -A 10 -- 'panic:|test timed out|_test\.go:[0-9]+:' "$logs"/* | head -n 14 | cut -c 1-400 || true
fi
exit "$status"
