# Specs refer only to objects in their own namespace: any "namespace" field
# in a spec must name the object's namespace. Helm values and substitution
# variables are the workload's data, and kustomize patches select objects of
# the manifests being built (their target's namespace is a pattern over
# those); none of them is a reference, here or in an override, and none is
# inspected.
# They are cut out before the walk, so their size and depth cost nothing
# here (the webhook refuses objects nested deeper than its limit anyway).
# Specs people write are walked; a ProxyAssemblage's is compiled by the
# manager from Modules already judged here, and a status write leaves the
# spec as it was, so neither is walked again (a 50-sync plan took half of
# the whole policy set's time).
package fleeet.references

# Where a sync's free-form data lives in Module and BootstrapModule specs.
free_form := array.concat(
	["sync/package/helm/values", "sync/package/kustomize/substitute", "sync/package/kustomize/patches"],
	[sprintf("overrides/%d/%s", [i, p]) |
		some i, _ in object.get(input.object, ["spec", "overrides"], [])
		some p in ["helm/values", "kustomize/substitute", "kustomize/patches"]
	],
)

authored if {
	input.request.kind.kind != "ProxyAssemblage"
	object.get(input.request, "subResource", "") == ""
}

deny contains msg if {
	authored
	walk(json.remove(input.object.spec, free_form), [path, value])
	count(path) > 0
	path[count(path) - 1] == "namespace"
	value != input.request.namespace
	msg := sprintf("spec.%s: refers to namespace %q; references must stay in namespace %s", [concat(".", [sprintf("%v", [p]) | some p in path]), value, input.request.namespace])
}
