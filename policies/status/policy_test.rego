package fleeet.status_test

import data.fleeet.status

req(kind, sub, user) := {
	"request": {"kind": {"kind": kind}, "subResource": sub, "name": "web", "userInfo": {"username": user}},
	"context": {"manager": {"username": "manager"}},
}

test_tenant_status_write_denied if {
	status.deny == {"status: the status of Module web is written only by the fleet manager, not by alice"} with input as req("Module", "status", "alice")
	count(status.deny) == 1 with input as req("BootstrapModule", "status", "alice")
}

test_manager_status_write_allowed if {
	count(status.deny) == 0 with input as req("Module", "status", "manager")
}

test_spec_writes_and_other_kinds_are_not_judged_here if {
	count(status.deny) == 0 with input as req("Module", "", "alice")
	count(status.deny) == 0 with input as req("Remote", "status", "alice")
}
