# A compiled ProxyAssemblage stays under the manager's --max-plan-bytes
# (input.context.limits.maxPlanBytes), so one Remote selected by too many
# Modules is named instead of failing in etcd.
package fleeet.size

import data.fleeet.lib

deny contains msg if {
	lib.kind == "ProxyAssemblage"
	input.request.subResource == ""
	limit := input.context.limits.maxPlanBytes
	size := count(json.marshal(input.object.spec))
	size > limit
	msg := sprintf("spec: the plan of Remote %s is %d bytes, over the %d-byte limit (--max-plan-bytes); select fewer Modules for this Remote", [input.request.name, size, limit])
}
