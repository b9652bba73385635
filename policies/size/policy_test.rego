package fleeet.size_test

import data.fleeet.size

req(limit) := {
	"request": {"kind": {"kind": "ProxyAssemblage"}, "name": "edge", "subResource": ""},
	"object": {"spec": {"assemblage": {"syncs": [{"name": "app"}]}}},
	"context": {"limits": {"maxPlanBytes": limit}},
}

test_small_plan_allowed if {
	count(size.deny) == 0 with input as req(1000)
}

test_large_plan_denied_naming_the_remote if {
	size.deny == {"spec: the plan of Remote edge is 41 bytes, over the 10-byte limit (--max-plan-bytes); select fewer Modules for this Remote"} with input as req(10)
}
