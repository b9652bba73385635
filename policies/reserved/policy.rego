# Labels and annotations under fleeet.dev/ are set only by the fleet
# manager: tenants and registrants may neither add, change nor remove them.
# Four exceptions: a Remote's retry request, which users write (fleetctl
# retry) to have the cluster try its syncs again; a Module's rollout
# approval and undo, which users write (fleetctl rollout approve|undo), each
# naming the revision it is for, and its pause (fleetctl rollout
# pause|resume), saying when and why; and the label naming the
# RegistrationToken a Remote was created through, which a registration
# identity sets on the Remote it creates (package registration checks it
# names the identity's own token) and no one changes afterwards; and the
# recovery key annotation (below). A delete (only CompiledSyncs' reach the
# webhook) changes no key, and its object is null: nothing here judges it.
package fleeet.reserved

import data.fleeet.lib

retry_annotation := "fleeet.dev/retry-requested-at"

registration_token_label := "fleeet.dev/registration-token"

# The retry request ends up in the cluster's plan, whose field holds at most
# 64 characters.
retry_max := 64

user_settable(field, k) if {
	lib.kind == "Remote"
	field == "annotations"
	k == retry_annotation
}

# A Module's approval and undo name a revision and a stage (a DNS label); its
# pause a time and a short reason.
rollout_annotations := {"fleeet.dev/approve", "fleeet.dev/undo", "fleeet.dev/pause"}

rollout_max := 128

user_settable(field, k) if {
	not lib.registrant
	lib.kind == "Module"
	field == "annotations"
	k in rollout_annotations
}

user_settable(field, k) if {
	lib.registrant
	lib.kind == "Remote"
	input.request.operation == "CREATE"
	field == "labels"
	k == registration_token_label
}

# The public recovery key a registrant names on the Remote it creates; the
# fleet manager rotates it on each recovery. Users who may write the Remote
# name a new one with fleetctl reenrol, stamping when; the cluster itself
# may not, so a stolen cluster token cannot swap it.
recovery_key_annotation := "fleeet.dev/recovery-key"

reenrolled_at_annotation := "fleeet.dev/reenrolled-at"

user_settable(field, k) if {
	lib.registrant
	lib.kind == "Remote"
	input.request.operation == "CREATE"
	field == "annotations"
	k == recovery_key_annotation
}

user_settable(field, k) if {
	not lib.registrant
	not lib.cluster_identity
	lib.kind == "Remote"
	field == "annotations"
	k in {recovery_key_annotation, reenrolled_at_annotation}
}

# An Ed25519 public key in standard base64.
deny contains msg if {
	not lib.manager
	not lib.deletes
	key := object.get(input.object, ["metadata", "annotations", recovery_key_annotation], null)
	key != null
	not regex.match(`^[A-Za-z0-9+/]{43}=$`, key)
	msg := sprintf("metadata.annotations[%s]: not an Ed25519 public key in standard base64", [recovery_key_annotation])
}

deny contains msg if {
	not lib.manager
	not lib.deletes
	at := object.get(input.object, ["metadata", "annotations", reenrolled_at_annotation], null)
	at != null
	not time.parse_rfc3339_ns(at)
	msg := sprintf("metadata.annotations[%s]: not an RFC 3339 time", [reenrolled_at_annotation])
}

changed contains [field, k] if {
	not lib.deletes
	some field in ["labels", "annotations"]
	new := object.get(input.object, ["metadata", field], {})
	old := object.get(input, ["oldObject", "metadata", field], {})
	some k in object.keys(new) | object.keys(old)
	lib.reserved_key(k)
	not user_settable(field, k)
	object.get(new, k, null) != object.get(old, k, null)
}

deny contains msg if {
	not lib.manager
	some [field, k] in changed
	msg := sprintf("metadata.%s[%s]: keys under fleeet.dev/ are set only by the fleet manager", [field, k])
}

deny contains msg if {
	lib.kind == "Remote"
	token := input.object.metadata.annotations[retry_annotation]
	count(token) > retry_max
	msg := sprintf("metadata.annotations[%s]: at most %d characters, not %d (fleetctl retry writes the time)", [retry_annotation, retry_max, count(token)])
}

deny contains msg if {
	lib.kind == "Module"
	some k in rollout_annotations
	v := input.object.metadata.annotations[k]
	count(v) > rollout_max
	msg := sprintf("metadata.annotations[%s]: at most %d characters, not %d (fleetctl rollout writes a revision and a stage, or a time and a short reason)", [k, rollout_max, count(v)])
}
