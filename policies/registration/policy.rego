# A RegistrationToken's identity may only create pull Remotes, as the
# token's own ServiceAccount, before the token expires, within its
# registration count, naming the token, and carrying only the labels the
# token sets or frees. Only the manager writes a RegistrationToken's status,
# which records the registrations.
#
# input.context.registrationToken is the token behind the identity;
# input.context.registrationIdentity.uid is the ServiceAccount the manager
# made for it; input.context.registrationRemotes are the Remotes labelled
# as created through it, recorded or not yet; input.context.now is the
# admission time (RFC 3339).
package fleeet.registration

import data.fleeet.lib

token := input.context.registrationToken

token_label := "fleeet.dev/registration-token"

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

# A tenant may create a ServiceAccount under the name of a retired
# registration identity; only the one the manager made for the token counts.
deny contains msg if {
	lib.registrant
	token
	object.get(input.request.userInfo, "uid", "") != object.get(input.context, ["registrationIdentity", "uid"], null)
	msg := sprintf("%s is not the registration identity of RegistrationToken %s", [lib.user, token.metadata.name])
}

deny contains msg if {
	lib.registrant
	time.parse_rfc3339_ns(token.status.expiresAt) <= time.parse_rfc3339_ns(input.context.now)
	msg := sprintf("RegistrationToken %s expired at %s", [token.metadata.name, token.status.expiresAt])
}

# Registrations used: those recorded, and Remotes created through the token
# that the manager has not recorded yet.
used := count({r.uid | some r in object.get(token, ["status", "registered"], [])} | {r.uid | some r in object.get(input.context, "registrationRemotes", [])})

deny contains msg if {
	lib.registrant
	used >= token.spec.maxRegistrations
	msg := sprintf("RegistrationToken %s is used up: %d of %d registrations", [token.metadata.name, min([used, token.spec.maxRegistrations]), token.spec.maxRegistrations])
}

deny contains "spec.kubeconfigRef: a registration creates a pull Remote; it cannot carry a kubeconfig" if {
	lib.registrant
	input.object.spec.kubeconfigRef
}

# The manager learns which token a Remote came through from this label,
# which no one else may set (package reserved).
deny contains msg if {
	lib.registrant
	creates_remote
	object.get(input.object, ["metadata", "labels", token_label], null) != token.metadata.name
	msg := sprintf("metadata.labels[%s]: a registered Remote names its RegistrationToken, %s", [token_label, token.metadata.name])
}

deny contains msg if {
	lib.registrant
	some k, v in input.object.metadata.labels
	want := token.spec.remoteLabels[k]
	v != want
	msg := sprintf("metadata.labels[%s]: RegistrationToken %s sets it to %q; a registrant may not choose another value", [k, token.metadata.name, want])
}

deny contains msg if {
	lib.registrant
	some k, _ in input.object.metadata.labels
	not lib.reserved_key(k)
	not token.spec.remoteLabels[k]
	not k in object.get(token, ["spec", "freeLabelKeys"], [])
	msg := sprintf("metadata.labels[%s]: RegistrationToken %s does not let a registrant choose this label; list it in the token's spec.freeLabelKeys", [k, token.metadata.name])
}

deny contains msg if {
	lib.kind == "RegistrationToken"
	input.request.subResource == "status"
	not lib.manager
	msg := sprintf("status: the status of RegistrationToken %s records its registrations and is written only by the fleet manager, not by %s", [input.request.name, lib.user])
}
