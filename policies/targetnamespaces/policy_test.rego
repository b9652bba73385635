package fleeet.targetnamespaces_test

import data.fleeet.targetnamespaces

module(pkg, annotations) := {
	"request": {"namespace": "team-a", "kind": {"kind": "Module"}},
	"namespace": {"annotations": annotations},
	"object": {"spec": {"sync": {"package": pkg}}},
}

test_own_namespace_by_default if {
	count(targetnamespaces.deny) == 0 with input as module({"kustomize": {"targetNamespace": "team-a"}}, {})
}

test_other_namespace_denied_by_default if {
	some msg in targetnamespaces.deny with input as module({"helm": {"targetNamespace": "kube-system"}}, {})
	startswith(msg, `spec.sync.package.helm.targetNamespace: namespace "kube-system" is outside what tenant team-a may deploy to (team-a;`)
}

test_annotation_globs if {
	inp := module({"kustomize": {"targetNamespace": "team-a-web"}}, {"fleeet.dev/target-namespaces": "team-a-*, shared"})
	count(targetnamespaces.deny) == 0 with input as inp
	count(targetnamespaces.deny) == 1 with input as module({"kustomize": {"targetNamespace": "team-a"}}, {"fleeet.dev/target-namespaces": "team-a-*, shared"})
}

test_helm_storage_namespace_judged_as_a_target if {
	some msg in targetnamespaces.deny with input as module({"helm": {"targetNamespace": "team-a", "storageNamespace": "kube-system"}}, {})
	startswith(msg, `spec.sync.package.helm.storageNamespace: namespace "kube-system" is outside`)
	count(targetnamespaces.deny) == 0 with input as module({"helm": {"storageNamespace": "fleeet-system"}}, {"fleeet.dev/target-namespaces": "fleeet-system"})
}
