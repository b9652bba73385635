# Labels and annotations under fleeet.dev/ are set only by the fleet
# manager: tenants and registrants may neither add, change nor remove them.
# Three exceptions: a Remote's retry request, which users write (fleetctl
# retry) to have the cluster try its syncs again; a Module's rollout
# approval and undo, which users write (fleetctl rollout approve|undo), each
# naming the revision it is for, and its pause (fleetctl rollout
# pause|resume), saying when and why; and the label naming the
# RegistrationToken a Remote was created through, which a registration
# identity sets on the Remote it creates (package registration checks it
# names the identity's own token) and no one changes afterwards.
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

changed contains [field, k] if {
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
