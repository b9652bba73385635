package fleeet.reserved_test

import data.fleeet.reserved

req(user, old, new) := {
	"request": {"userInfo": {"username": user}},
	"context": {"manager": {"username": "manager"}},
	"object": {"metadata": new},
	"oldObject": {"metadata": old},
}

test_tenant_adding_reserved_label_denied if {
	reserved.deny == {"metadata.labels[fleeet.dev/tenant]: keys under fleeet.dev/ are set only by the fleet manager"} with input as req("alice", {}, {"labels": {"fleeet.dev/tenant": "x"}})
}

test_tenant_removing_reserved_annotation_denied if {
	count(reserved.deny) == 1 with input as req("alice", {"annotations": {"x.fleeet.dev/y": "1"}}, {})
}

test_unchanged_reserved_keys_and_other_keys_allowed if {
	md := {"labels": {"fleeet.dev/assemblage": "a", "team": "web"}}
	count(reserved.deny) == 0 with input as req("alice", md, {"labels": {"fleeet.dev/assemblage": "a", "team": "api"}})
}

test_manager_may_set_reserved_keys if {
	count(reserved.deny) == 0 with input as req("manager", {}, {"labels": {"fleeet.dev/tenant": "x"}})
}

remote(user, old, new) := object.union(req(user, old, new), {"request": {"kind": {"kind": "Remote"}}})

test_tenant_may_request_a_retry_of_a_remote if {
	count(reserved.deny) == 0 with input as remote("alice", {}, {"annotations": {"fleeet.dev/retry-requested-at": "2026-11-22T10:00:00Z"}})
}

test_retry_request_on_other_kinds_is_reserved if {
	count(reserved.deny) == 1 with input as req("alice", {}, {"annotations": {"fleeet.dev/retry-requested-at": "now"}})
}

test_overlong_retry_request_denied if {
	token := "0123456789012345678901234567890123456789012345678901234567890123X"
	reserved.deny == {"metadata.annotations[fleeet.dev/retry-requested-at]: at most 64 characters, not 65 (fleetctl retry writes the time)"} with input as remote("alice", {}, {"annotations": {"fleeet.dev/retry-requested-at": token}})
}
