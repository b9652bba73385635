# A sync may deploy only into the namespaces its tenant is allowed: the
# comma-separated globs in the tenant namespace's annotation
# fleeet.dev/target-namespaces, or else the tenant namespace's own name.
package fleeet.targetnamespaces

import data.fleeet.lib

allowance := {trim_space(p) | some p in split(input.namespace.annotations["fleeet.dev/target-namespaces"], ",")}

default_allowance := {input.request.namespace}

allowed := allowance if input.namespace.annotations["fleeet.dev/target-namespaces"]

else := default_allowance

targets[path] := ns if {
	lib.kind in lib.placement_kinds
	some p in ["kustomize", "helm"]
	ns := input.object.spec.sync["package"][p].targetNamespace
	path := sprintf("spec.sync.package.%s.targetNamespace", [p])
}

# Helm's release history is written where a release is, so it is judged
# like a target.
targets[path] := ns if {
	lib.kind in lib.placement_kinds
	ns := input.object.spec.sync["package"].helm.storageNamespace
	path := "spec.sync.package.helm.storageNamespace"
}

permitted(ns) if {
	some pattern in allowed
	glob.match(pattern, [], ns)
}

deny contains msg if {
	some path, ns in targets
	not permitted(ns)
	msg := sprintf("%s: namespace %q is outside what tenant %s may deploy to (%s; set by the namespace annotation fleeet.dev/target-namespaces)", [path, ns, input.request.namespace, concat(", ", sort(allowed))])
}
