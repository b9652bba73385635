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

registrant := "system:serviceaccount:t:fleeet-registration-edge"

create_remote(user, labels) := {
	"request": {"operation": "CREATE", "kind": {"kind": "Remote"}, "namespace": "t", "userInfo": {"username": user}},
	"context": {"manager": {"username": "manager"}},
	"object": {"metadata": {"labels": labels}},
	"oldObject": null,
}

test_a_registrant_names_its_token_on_the_remote_it_creates if {
	count(reserved.deny) == 0 with input as create_remote(registrant, {"fleeet.dev/registration-token": "edge"})
}

test_only_a_registrant_sets_the_registration_token_label if {
	reserved.deny == {"metadata.labels[fleeet.dev/registration-token]: keys under fleeet.dev/ are set only by the fleet manager"} with input as create_remote("alice", {"fleeet.dev/registration-token": "edge"})
	count(reserved.deny) == 1 with input as create_remote("system:serviceaccount:t:fleeet-remote-edge", {"fleeet.dev/registration-token": "edge"})
}

test_no_one_changes_the_registration_token_label_later if {
	update := json.patch(create_remote(registrant, {"fleeet.dev/registration-token": "other"}), [
		{"op": "replace", "path": "/request/operation", "value": "UPDATE"},
		{"op": "replace", "path": "/oldObject", "value": {"metadata": {"labels": {"fleeet.dev/registration-token": "edge"}}}},
	])
	count(reserved.deny) == 1 with input as update
	count(reserved.deny) == 1 with input as json.patch(update, [{"op": "replace", "path": "/request/userInfo/username", "value": "alice"}])
}

test_a_registrant_sets_no_other_reserved_label if {
	count(reserved.deny) == 1 with input as create_remote(registrant, {"fleeet.dev/remote": "x"})
}

module(user, old, new) := object.union(req(user, old, new), {"request": {"kind": {"kind": "Module"}}})

test_tenant_may_approve_undo_and_pause_a_module_rollout if {
	count(reserved.deny) == 0 with input as module("alice", {}, {"annotations": {"fleeet.dev/approve": "0a1b2c3d4e/canary", "fleeet.dev/undo": "0a1b2c3d4e", "fleeet.dev/pause": "2026-11-25T23:00:00Z"}})
}

test_tenant_may_resume_a_module_rollout if {
	count(reserved.deny) == 0 with input as module("alice", {"annotations": {"fleeet.dev/pause": "2026-11-25T23:00:00Z"}}, {})
}

test_rollout_annotations_on_other_kinds_are_reserved if {
	count(reserved.deny) == 1 with input as remote("alice", {}, {"annotations": {"fleeet.dev/undo": "0a1b2c3d4e"}})
}

test_overlong_rollout_annotation_denied if {
	v := concat("", ["a" | some _ in numbers.range(1, 129)])
	reserved.deny == {"metadata.annotations[fleeet.dev/undo]: at most 128 characters, not 129 (fleetctl rollout writes a revision and a stage, or a time and a short reason)"} with input as module("alice", {}, {"annotations": {"fleeet.dev/undo": v}})
	reserved.deny == {"metadata.annotations[fleeet.dev/pause]: at most 128 characters, not 129 (fleetctl rollout writes a revision and a stage, or a time and a short reason)"} with input as module("alice", {}, {"annotations": {"fleeet.dev/pause": v}})
}

recovery_key := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

with_recovery_key(user, key) := json.patch(create_remote(user, {"fleeet.dev/registration-token": "edge"}), [
	{"op": "add", "path": "/object/metadata/annotations", "value": {"fleeet.dev/recovery-key": key}},
])

test_a_registrant_names_its_recovery_key_on_the_remote_it_creates if {
	count(reserved.deny) == 0 with input as with_recovery_key(registrant, recovery_key)
}

test_a_recovery_key_must_be_an_ed25519_public_key if {
	reserved.deny == {"metadata.annotations[fleeet.dev/recovery-key]: not an Ed25519 public key in standard base64"} with input as with_recovery_key(registrant, "not-a-key")
}

test_only_the_manager_changes_the_recovery_key_later if {
	update := json.patch(with_recovery_key(registrant, recovery_key), [
		{"op": "replace", "path": "/request/operation", "value": "UPDATE"},
		{"op": "replace", "path": "/oldObject", "value": {"metadata": {"labels": {"fleeet.dev/registration-token": "edge"}, "annotations": {"fleeet.dev/recovery-key": "b"}}}},
	])
	count(reserved.deny) == 1 with input as json.patch(update, [{"op": "replace", "path": "/request/userInfo/username", "value": "system:serviceaccount:t:fleeet-remote-edge"}])
	count(reserved.deny) == 0 with input as json.patch(update, [{"op": "replace", "path": "/request/userInfo/username", "value": "manager"}])
}

test_a_user_names_a_new_recovery_key_with_fleetctl_reenrol if {
	reenrol := {"annotations": {"fleeet.dev/recovery-key": recovery_key, "fleeet.dev/reenrolled-at": "2026-01-01T00:00:00Z"}}
	count(reserved.deny) == 0 with input as remote("alice", {}, reenrol)
	count(reserved.deny) == 2 with input as object.union(remote("system:serviceaccount:t:fleeet-remote-edge", {}, reenrol), {"request": {"namespace": "t"}})
	reserved.deny == {"metadata.annotations[fleeet.dev/reenrolled-at]: not an RFC 3339 time"} with input as remote("alice", {}, {"annotations": {"fleeet.dev/reenrolled-at": "yesterday"}})
}

# A delete's object is null: it changes no key, and judging it must not fail.
test_a_delete_is_not_judged if {
	count(reserved.deny) == 0 with input as {
		"request": {"operation": "DELETE", "kind": {"kind": "CompiledSync"}, "userInfo": {"username": "alice"}},
		"context": {"manager": {"username": "manager"}},
		"object": null,
		"oldObject": {"metadata": {"labels": {"fleeet.dev/sync": "web"}, "annotations": {"fleeet.dev/recovery-key": "not-a-key"}}},
	}
}
