#!/usr/bin/env bash
# verify.sh fails when the generated files in the working tree are not what
# `make generate` writes: it regenerates into a scratch copy and compares.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cd "$root"
git ls-files --cached --others --exclude-standard -z | xargs -0 cp --parents -t "$scratch"
make -s -C "$scratch" generate >/dev/null

status=0
for path in api config charts docs/reference.md; do
	if ! diff -r -q -x __snapshot__ "$root/$path" "$scratch/$path" >/dev/null; then
		diff -r -x __snapshot__ "$root/$path" "$scratch/$path" | head -n 40 || true
		status=1
	fi
done
if [ $status -ne 0 ]; then
	echo "generated files are stale: run make generate and commit the result" >&2
fi
exit $status
