# A Module's rollout windows must be able to open: a schedule that does not
# parse or never fires, an unknown time zone or a duration that is not
# positive would hold every rollout back for ever. Rego has no cron parser,
# so the webhook parses the windows and lists each field at fault in
# context.windows ({field, error}); this policy refuses the Module, and a
# Module whose windows were not worked out is refused too (fail closed).
package fleeet.windows

import data.fleeet.lib

judged if {
	lib.kind == "Module"
	input.request.subResource == ""
}

deny contains msg if {
	judged
	some p in input.context.windows
	msg := sprintf("%s: %s", [p.field, p.error])
}

deny contains "spec.rollout.windows: the webhook did not check the windows; refusing rather than admitting windows that may never open" if {
	judged
	count(object.get(input.object, ["spec", "rollout", "windows"], [])) > 0
	not input.context.windows
}
