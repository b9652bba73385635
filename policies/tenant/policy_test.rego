package fleeet.tenant_test

import data.fleeet.tenant

req(labels, user) := {
	"request": {"namespace": "team-a", "userInfo": {"username": user}},
	"namespace": {"name": "team-a", "labels": labels},
	"context": {"manager": {"username": "manager"}},
}

test_tenant_namespace_allowed if {
	count(tenant.deny) == 0 with input as req({"fleeet.dev/tenant": "true"}, "alice")
}

test_other_namespace_denied if {
	tenant.deny == {"metadata.namespace: team-a is not a tenant namespace; fleeet objects live only in namespaces labelled fleeet.dev/tenant=true"} with input as req({}, "alice")
}

test_manager_may_write_anywhere if {
	count(tenant.deny) == 0 with input as req({}, "manager")
}

test_tenant_label_other_than_true_denied if {
	every v in ["false", "", "yes", "True"] {
		count(tenant.deny) == 1 with input as req({"fleeet.dev/tenant": v}, "alice")
	}
}

# A delete places nothing: what a namespace that lost its label still holds
# can go (who may delete it is for the kind's own policy).
test_deletes_outside_tenant_namespaces_are_not_judged if {
	count(tenant.deny) == 0 with input as object.union(req({}, "alice"), {"request": {"operation": "DELETE"}})
}
