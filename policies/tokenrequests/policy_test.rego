package fleeet.tokenrequests_test

import data.fleeet.tokenrequests

mint(user, spec) := {
	"request": {
		"operation": "CREATE", "kind": {"group": "authentication.k8s.io", "kind": "TokenRequest"},
		"subResource": "token", "namespace": "t", "name": "fleeet-remote-edge",
		"userInfo": {"username": user},
	},
	"object": {"spec": spec},
	"context": {"limits": {"maxCredentialSeconds": 86400}},
}

edge := "system:serviceaccount:t:fleeet-remote-edge"

# The apiserver sends an unbound request with boundObjectRef: null.
test_a_token_within_the_credential_lifetime_is_allowed if {
	count(tokenrequests.deny) == 0 with input as mint(edge, {"expirationSeconds": 86400, "audiences": ["https://kubernetes.default.svc"]})
	count(tokenrequests.deny) == 0 with input as mint(edge, {"expirationSeconds": 600, "boundObjectRef": null})
}

test_a_longer_token_is_denied if {
	tokenrequests.deny == {"spec.expirationSeconds: a cluster identity's tokens live at most 86400 seconds, not 86401; system:serviceaccount:t:fleeet-remote-edge may not mint a longer one"} with input as mint(edge, {"expirationSeconds": 86401})
}

test_a_bound_token_is_denied if {
	tokenrequests.deny == {"spec.boundObjectRef: a cluster identity's tokens are bound to no object; system:serviceaccount:t:fleeet-remote-edge may not bind one to Pod p"} with input as mint(edge, {"expirationSeconds": 600, "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}})
}

test_other_identities_are_not_judged if {
	count(tokenrequests.deny) == 0 with input as mint("system:serviceaccount:fleeet-system:fleet-manager", {"expirationSeconds": 999999})
	count(tokenrequests.deny) == 0 with input as mint("system:serviceaccount:other:fleeet-remote-edge", {"expirationSeconds": 999999})
}

test_other_kinds_are_not_judged if {
	remote := json.patch(mint(edge, {"expirationSeconds": 999999}), [{"op": "replace", "path": "/request/kind/kind", "value": "Remote"}])
	count(tokenrequests.deny) == 0 with input as remote
}
