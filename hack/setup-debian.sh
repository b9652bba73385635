#!/usr/bin/env bash
# setup-debian.sh installs the Debian packages fleeet's tests need, if missing:
# git (its http-backend serves test repositories over smart HTTP) and yamllint
# (chart-testing lints the charts' YAML with it).
set -euo pipefail

packages=(git yamllint)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
echo "installing Debian packages: ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
