# A RegistrationToken's identity may only create pull Remotes, before the
# token expires, within its registration count, without choosing labels the
# token sets itself. input.context.registrationToken is the token behind
# the identity; input.context.now is the admission time (RFC 3339).
package fleeet.registration

import data.fleeet.lib

token := input.context.registrationToken

deny contains "a registration identity may only create Remotes" if {
	lib.registrant
	not creates_remote
}

creates_remote if {
	input.request.operation == "CREATE"
	lib.kind == "Remote"
	input.request.subResource == ""
}

deny contains msg if {
	lib.registrant
	object.get(input, ["context", "registrationToken"], null) == null
	msg := sprintf("the RegistrationToken behind %s no longer exists", [lib.user])
}

deny contains msg if {
	lib.registrant
	time.parse_rfc3339_ns(token.status.expiresAt) <= time.parse_rfc3339_ns(input.context.now)
	msg := sprintf("RegistrationToken %s expired at %s", [token.metadata.name, token.status.expiresAt])
}

deny contains msg if {
	lib.registrant
	used := count(object.get(token, ["status", "registered"], []))
	used >= token.spec.maxRegistrations
	msg := sprintf("RegistrationToken %s is used up: %d of %d registrations", [token.metadata.name, used, token.spec.maxRegistrations])
}

deny contains "spec.kubeconfigRef: a registration creates a pull Remote; it cannot carry a kubeconfig" if {
	lib.registrant
	input.object.spec.kubeconfigRef
}

deny contains msg if {
	lib.registrant
	some k, v in input.object.metadata.labels
	want := token.spec.remoteLabels[k]
	v != want
	msg := sprintf("metadata.labels[%s]: RegistrationToken %s sets it to %q; a registrant may not choose another value", [k, token.metadata.name, want])
}
