package fleeet.registration_test

import data.fleeet.registration

token := {
	"metadata": {"name": "edge"},
	"spec": {"maxRegistrations": 1, "remoteLabels": {"env": "prod"}},
	"status": {"expiresAt": "2026-01-01T01:00:00Z", "registered": []},
}

reg(op, kind, object, tok) := {
	"request": {"operation": op, "kind": {"kind": kind}, "subResource": "", "namespace": "t", "userInfo": {"username": "system:serviceaccount:t:fleeet-registration-edge"}},
	"object": object,
	"context": {"registrationToken": tok, "now": "2026-01-01T00:30:00Z"},
}

remote(labels) := {"metadata": {"name": "c", "labels": labels}, "spec": {}}

test_valid_registration_allowed if {
	count(registration.deny) == 0 with input as reg("CREATE", "Remote", remote({"env": "prod", "region": "eu"}), token)
}

test_other_operations_denied if {
	registration.deny == {"a registration identity may only create Remotes"} with input as reg("UPDATE", "Remote", remote({}), token)
	registration.deny == {"a registration identity may only create Remotes"} with input as reg("CREATE", "Module", remote({}), token)
}

test_missing_token_denied if {
	registration.deny == {"the RegistrationToken behind system:serviceaccount:t:fleeet-registration-edge no longer exists"} with input as reg("CREATE", "Remote", remote({}), null)
}

test_expired_denied if {
	expired := json.patch(token, [{"op": "replace", "path": "/status/expiresAt", "value": "2026-01-01T00:00:00Z"}])
	registration.deny == {"RegistrationToken edge expired at 2026-01-01T00:00:00Z"} with input as reg("CREATE", "Remote", remote({}), expired)
}

test_used_up_denied if {
	used := json.patch(token, [{"op": "replace", "path": "/status/registered", "value": [{"name": "a"}]}])
	registration.deny == {"RegistrationToken edge is used up: 1 of 1 registrations"} with input as reg("CREATE", "Remote", remote({}), used)
}

test_kubeconfig_and_token_labels_denied if {
	r := {"metadata": {"name": "c", "labels": {"env": "dev"}}, "spec": {"kubeconfigRef": {"name": "k"}}}
	registration.deny == {
		"spec.kubeconfigRef: a registration creates a pull Remote; it cannot carry a kubeconfig",
		`metadata.labels[env]: RegistrationToken edge sets it to "prod"; a registrant may not choose another value`,
	} with input as reg("CREATE", "Remote", r, token)
}
