#!/usr/bin/env bash
# build.sh builds the external programs pinned in hack/tools/go.mod into a cache
# outside the repository, one directory per tool and version, and prints the
# directory of each requested tool (or of all of them) as NAME=DIR lines.
#
# The cache lives in $FLEEET_TOOLS_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/fleeet/tools),
# so fresh clones on one machine share it and a new machine builds each tool once.
#
# Usage: hack/tools/build.sh [tool...]   tools: kube-apiserver kubelet
#        kube-controller-manager kube-scheduler kube-proxy etcd source-controller
#        kustomize-controller helm-controller helm ct helm-unittest helm-docs
#        controller-gen opa promtool cert-manager sops
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${FLEEET_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleeet/tools}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=${GOFLAGS:--buildvcs=false}

# name  package  module (its version keys the cache)  [directory of its go.mod, if not this one]
tools=(
	"kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes"
	"kubelet k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes"
	"kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes"
	"kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes"
	"kube-proxy k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes"
	"kubectl k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes"
	"etcd go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3"
	"source-controller github.com/fluxcd/source-controller github.com/fluxcd/source-controller"
	"kustomize-controller github.com/fluxcd/kustomize-controller github.com/fluxcd/kustomize-controller"
	"helm-controller github.com/fluxcd/helm-controller github.com/fluxcd/helm-controller"
	"helm helm.sh/helm/v3/cmd/helm helm.sh/helm/v3"
	"ct github.com/helm/chart-testing/v3/ct github.com/helm/chart-testing/v3"
	"helm-unittest github.com/helm-unittest/helm-unittest/cmd/helm-unittest github.com/helm-unittest/helm-unittest"
	"helm-docs github.com/norwoodj/helm-docs/cmd/helm-docs github.com/norwoodj/helm-docs"
	"controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen sigs.k8s.io/controller-tools"
	"opa github.com/open-policy-agent/opa github.com/open-policy-agent/opa"
	"promtool github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus promtool"
	"cert-manager github.com/fleeet-dev/fleeet/hack/tools/cert-manager github.com/cert-manager/cert-manager cert-manager"
	"sops github.com/getsops/sops/v3/cmd/sops github.com/getsops/sops/v3"
)

want=("$@")
selected() {
	[ ${#want[@]} -eq 0 ] && return 0
	local w
	for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done
	return 1
}

for entry in "${tools[@]}"; do
	read -r name pkg mod moddir <<<"$entry"
	selected "$name" || continue
	cd "$here/${moddir:-.}"
	version=$(go list -m -f '{{.Version}}' "$mod")
	case "$pkg" in
	github.com/fleeet-dev/fleeet/*)
		# A main of ours around a pinned module: its sources key the cache too.
		version="$version-$(cat ./*.go go.mod go.sum | sha256sum | cut -c1-12)"
		;;
	esac
	dir="$cache/$name/$version"
	if [ ! -x "$dir/$name" ]; then
		echo "building $name $version into $dir" >&2
		mkdir -p "$dir"
		ldflags=""
		if [ "$mod" = k8s.io/kubernetes ]; then
			# Kubernetes reads its version from variables its release scripts
			# set; unset, every component reports v0.0.0-master.
			minor=${version#v*.}
			minor=${minor%%.*}
			major=${version#v}
			major=${major%%.*}
			v=k8s.io/component-base/version
			ldflags="-X $v.gitVersion=$version -X $v.gitMajor=$major -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
		fi
		# Build to a temporary name first so an interrupted build never looks complete.
		go build -trimpath -ldflags "$ldflags" -o "$dir/$name.tmp.$$" "$pkg"
		mv "$dir/$name.tmp.$$" "$dir/$name"
	fi
	echo "$name=$dir"
done
