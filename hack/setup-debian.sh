#!/usr/bin/env bash
# setup-debian.sh installs the Debian packages fleeet's tests need, if missing:
# git (its http-backend serves test repositories over smart HTTP), yamllint
# (chart-testing lints the charts' YAML with it), ca-certificates (make
# images copies its CA bundle into the images), and what internal/testenv's
# real nodes run Pods with: containerd and runc (the container runtime
# kubelet drives), containernetworking-plugins (the bridge, host-local,
# portmap and loopback CNI plugins), iptables and conntrack (kube-proxy's
# Service rules); and chromium-headless-shell, the browser the dashboard's
# tests drive.
#
# It also sets the kernel settings kubelet expects, persistently in
# /etc/sysctl.d: the tests' kubelets run with protectKernelDefaults, so they
# refuse to start rather than change the host's settings themselves, and the
# node tests are skipped until the settings are in place.
set -euo pipefail

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo

packages=(git yamllint ca-certificates containerd runc containernetworking-plugins conntrack iptables chromium-headless-shell)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing Debian packages: ${missing[*]}" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

# What kubelet's protectKernelDefaults checks (internal/testenv/nodecheck.go).
kernel_defaults=(vm.overcommit_memory=1 vm.panic_on_oom=0 kernel.panic=10 kernel.panic_on_oops=1
	kernel.keys.root_maxkeys=1000000 kernel.keys.root_maxbytes=25000000)
for kv in "${kernel_defaults[@]}"; do
	if [ "$(sysctl -n "${kv%%=*}")" != "${kv#*=}" ]; then
		conf=/etc/sysctl.d/90-fleeet-kubelet.conf
		echo "setting the kernel settings kubelet expects in $conf" >&2
		printf '# Kernel settings kubelet expects (protectKernelDefaults); written by fleeet hack/setup-debian.sh.\n' |
			$sudo tee "$conf" >/dev/null
		printf '%s\n' "${kernel_defaults[@]}" | $sudo tee -a "$conf" >/dev/null
		$sudo sysctl -q -p "$conf"
		break
	fi
done
