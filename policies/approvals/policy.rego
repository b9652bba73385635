# A Module's rollout annotations take one exact form, the one fleetctl
# rollout approve|undo writes, so a mistyped value is refused with the form
# instead of silently approving nothing:
#   fleeet.dev/approve: <revision>/<stage>
#   fleeet.dev/undo:    <revision>
# where <revision> is the Module's revision (status.rollout.revision: ten
# lower-case hex digits) and <stage> names one of spec.rollout.stages. A
# value is judged when it is written or changed, so a Module whose stages
# change later is not held back by an approval it already used. The pause,
#   fleeet.dev/pause:   <RFC 3339 time>[: <reason>]
# as fleetctl rollout pause writes it, is free text the manager repeats in
# the Module's status and events: printable ASCII only, so it can forge no
# line there (package reserved bounds its length).
package fleeet.approvals

import data.fleeet.lib

approve := "fleeet.dev/approve"

undo := "fleeet.dev/undo"

pause := "fleeet.dev/pause"

revision := `[0-9a-f]{10}`

stage_name := `[a-z0-9]([-a-z0-9]*[a-z0-9])?`

approve_form := "<revision>/<stage>: the Module's revision (status.rollout.revision, ten lower-case hex digits), a slash and a stage named in spec.rollout.stages, as fleetctl rollout approve writes it"

undo_form := "<revision>: the Module's revision (status.rollout.revision, ten lower-case hex digits), as fleetctl rollout undo writes it"

# written[k] is the value of annotation k when this request sets or changes it.
written[k] := v if {
	lib.kind == "Module"
	input.request.subResource == ""
	not lib.manager
	some k in {approve, undo, pause}
	v := input.object.metadata.annotations[k]
	v != object.get(input, ["oldObject", "metadata", "annotations", k], null)
}

deny contains msg if {
	v := written[approve]
	not regex.match(concat("", ["^", revision, "/", stage_name, "$"]), v)
	msg := sprintf("metadata.annotations[%s]: %q is not of the form %s", [approve, v, approve_form])
}

stages contains s.name if some s in object.get(input.object, ["spec", "rollout", "stages"], [])

deny contains msg if {
	v := written[approve]
	regex.match(concat("", ["^", revision, "/", stage_name, "$"]), v)
	stage := split(v, "/")[1]
	not stage in stages
	msg := sprintf("metadata.annotations[%s]: stage %q is not one of spec.rollout.stages %v; the form is %s", [approve, stage, sort(stages), approve_form])
}

deny contains msg if {
	v := written[undo]
	not regex.match(concat("", ["^", revision, "$"]), v)
	msg := sprintf("metadata.annotations[%s]: %q is not of the form %s", [undo, v, undo_form])
}

deny contains msg if {
	v := written[pause]
	not regex.match(`^[ -~]+$`, v)
	msg := sprintf("metadata.annotations[%s]: %q must be non-empty printable ASCII (fleetctl rollout pause writes the time and --reason)", [pause, v])
}
