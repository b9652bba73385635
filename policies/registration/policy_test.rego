package fleeet.registration_test

import data.fleeet.registration

token := {
	"metadata": {"name": "edge"},
	"spec": {"maxRegistrations": 1, "remoteLabels": {"env": "prod"}, "freeLabelKeys": ["region"]},
	"status": {"expiresAt": "2026-01-01T01:00:00Z", "registered": []},
}

user := "system:serviceaccount:t:fleeet-registration-edge"

reg(op, kind, object, tok) := {
	"request": {"operation": op, "kind": {"kind": kind}, "subResource": "", "namespace": "t", "name": "c", "userInfo": {"username": user, "uid": "sa-1"}},
	"object": object,
	"context": {
		"manager": {"username": "manager"},
		"registrationToken": tok,
		"registrationIdentity": {"uid": "sa-1"},
		"registrationRemotes": [],
		"now": "2026-01-01T00:30:00Z",
	},
}

remote(labels) := {"metadata": {"name": "c", "labels": object.union({"fleeet.dev/registration-token": "edge"}, labels)}, "spec": {}}

test_valid_registration_allowed if {
	count(registration.deny) == 0 with input as reg("CREATE", "Remote", remote({"env": "prod", "region": "eu"}), token)
	count(registration.deny) == 0 with input as reg("CREATE", "Remote", remote({}), token)
}

test_other_operations_denied if {
	registration.deny == {"a registration identity may only create Remotes"} with input as reg("UPDATE", "Remote", remote({}), token)
	registration.deny == {"a registration identity may only create Remotes"} with input as reg("CREATE", "Module", remote({}), token)
}

test_missing_token_denied if {
	registration.deny == {"the RegistrationToken behind system:serviceaccount:t:fleeet-registration-edge no longer exists"} with input as reg("CREATE", "Remote", remote({}), null)
}

# A request that did not come from the apiserver, or from a ServiceAccount a
# tenant made under a retired identity's name, does not carry the uid of the
# ServiceAccount the manager made for the token.
test_another_identity_under_the_name_denied if {
	want := {"system:serviceaccount:t:fleeet-registration-edge is not the registration identity of RegistrationToken edge"}
	registration.deny == want with input as json.patch(reg("CREATE", "Remote", remote({}), token), [{"op": "replace", "path": "/request/userInfo/uid", "value": "sa-2"}])
	registration.deny == want with input as json.patch(reg("CREATE", "Remote", remote({}), token), [{"op": "remove", "path": "/context/registrationIdentity"}])
	registration.deny == want with input as json.patch(reg("CREATE", "Remote", remote({}), token), [{"op": "remove", "path": "/request/userInfo/uid"}])
}

test_expired_denied if {
	expired := json.patch(token, [{"op": "replace", "path": "/status/expiresAt", "value": "2026-01-01T00:00:00Z"}])
	registration.deny == {"RegistrationToken edge expired at 2026-01-01T00:00:00Z"} with input as reg("CREATE", "Remote", remote({}), expired)
}

test_used_up_denied if {
	used := json.patch(token, [{"op": "replace", "path": "/status/registered", "value": [{"name": "a", "uid": "1"}]}])
	registration.deny == {"RegistrationToken edge is used up: 1 of 1 registrations"} with input as reg("CREATE", "Remote", remote({}), used)
}

# A Remote created through the token counts before the manager records it,
# and once only when it is recorded too.
test_stored_remotes_not_yet_recorded_count if {
	two := json.patch(token, [
		{"op": "replace", "path": "/spec/maxRegistrations", "value": 2},
		{"op": "replace", "path": "/status/registered", "value": [{"name": "a", "uid": "1"}]},
	])
	recorded := json.patch(reg("CREATE", "Remote", remote({}), two), [{"op": "replace", "path": "/context/registrationRemotes", "value": [{"name": "a", "uid": "1"}]}])
	count(registration.deny) == 0 with input as recorded
	pending := json.patch(recorded, [{"op": "add", "path": "/context/registrationRemotes/-", "value": {"name": "b", "uid": "2"}}])
	registration.deny == {"RegistrationToken edge is used up: 2 of 2 registrations"} with input as pending
	surplus := json.patch(pending, [{"op": "add", "path": "/context/registrationRemotes/-", "value": {"name": "c", "uid": "3"}}])
	registration.deny == {"RegistrationToken edge is used up: 2 of 2 registrations"} with input as surplus
}

test_kubeconfig_and_token_labels_denied if {
	r := {"metadata": {"name": "c", "labels": {"env": "dev", "fleeet.dev/registration-token": "edge"}}, "spec": {"kubeconfigRef": {"name": "k"}}}
	registration.deny == {
		"spec.kubeconfigRef: a registration creates a pull Remote; it cannot carry a kubeconfig",
		`metadata.labels[env]: RegistrationToken edge sets it to "prod"; a registrant may not choose another value`,
	} with input as reg("CREATE", "Remote", r, token)
}

test_labels_the_token_does_not_free_denied if {
	registration.deny == {"metadata.labels[tier]: RegistrationToken edge does not let a registrant choose this label; list it in the token's spec.freeLabelKeys"} with input as reg("CREATE", "Remote", remote({"tier": "payments"}), token)
	closed := json.remove(token, ["spec/freeLabelKeys"])
	count(registration.deny) == 1 with input as reg("CREATE", "Remote", remote({"region": "eu"}), closed)
}

# Reserved keys are left to the reserved policy, which names them.
test_reserved_labels_are_not_judged_here if {
	count(registration.deny) == 0 with input as reg("CREATE", "Remote", remote({"fleeet.dev/remote": "x"}), token)
}

test_the_remote_names_its_own_token if {
	want := {"metadata.labels[fleeet.dev/registration-token]: a registered Remote names its RegistrationToken, edge"}
	registration.deny == want with input as reg("CREATE", "Remote", {"metadata": {"name": "c"}, "spec": {}}, token)
	registration.deny == want with input as reg("CREATE", "Remote", remote({"fleeet.dev/registration-token": "other"}), token)
}

status(user) := {
	"request": {"operation": "UPDATE", "kind": {"kind": "RegistrationToken"}, "subResource": "status", "namespace": "t", "name": "edge", "userInfo": {"username": user}},
	"object": token,
	"context": {"manager": {"username": "manager"}},
}

test_only_the_manager_writes_token_status if {
	registration.deny == {"status: the status of RegistrationToken edge records its registrations and is written only by the fleet manager, not by alice"} with input as status("alice")
	count(registration.deny) == 0 with input as status("manager")
	count(registration.deny) == 0 with input as json.patch(status("alice"), [{"op": "replace", "path": "/request/subResource", "value": ""}])
}
