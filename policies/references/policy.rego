# Specs refer only to objects in their own namespace: any "namespace" field
# in a spec must name the object's namespace. Helm values and substitution
# variables are the workload's data, not references, and are not inspected.
# Specs people write are walked; a ProxyAssemblage's is compiled by the
# manager from Modules already judged here, and a status write leaves the
# spec as it was, so neither is walked again (a 50-sync plan took half of
# the whole policy set's time).
package fleeet.references

free_form := {"values", "substitute"}

authored if {
	input.request.kind.kind != "ProxyAssemblage"
	object.get(input.request, "subResource", "") == ""
}

deny contains msg if {
	authored
	walk(input.object.spec, [path, value])
	count(path) > 0
	path[count(path) - 1] == "namespace"
	not inside_free_form(path)
	value != input.request.namespace
	msg := sprintf("spec.%s: refers to namespace %q; references must stay in namespace %s", [concat(".", [sprintf("%v", [p]) | some p in path]), value, input.request.namespace])
}

inside_free_form(path) if {
	some p in path
	p in free_form
}
