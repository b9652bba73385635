package fleeet.approvals_test

import data.fleeet.approvals

module(annotations) := {
	"request": {"kind": {"kind": "Module"}, "subResource": "", "operation": "UPDATE", "userInfo": {"username": "alice"}},
	"context": {"manager": {"username": "manager"}},
	"object": {
		"metadata": {"annotations": annotations},
		"spec": {"rollout": {"stages": [{"name": "canary"}, {"name": "prod-eu"}]}},
	},
	"oldObject": {"metadata": {"annotations": {}}},
}

test_what_fleetctl_writes_passes if {
	count(approvals.deny) == 0 with input as module({"fleeet.dev/approve": "0a1b2c3d4e/prod-eu", "fleeet.dev/undo": "0a1b2c3d4e", "fleeet.dev/pause": "2026-11-25T23:00:00Z: change freeze"})
}

denied(annotations, want) if {
	some msg in approvals.deny with input as module(annotations)
	contains(msg, want)
}

test_malformed_approvals_are_refused_with_the_form if {
	every v in ["0A1B2C3D4E/canary", "0a1b2c3d4e/Canary", " 0a1b2c3d4e/canary", "0a1b2c3d4e/canary ", "0a1b2c3d4e/*", "*/canary", "0a1b2c3d4e/", "/canary", "", "0a1b2c3/canary", "0a1b2c3d4e/canary/x"] {
		denied({"fleeet.dev/approve": v}, "is not of the form <revision>/<stage>")
	}
}

test_an_unknown_stage_is_refused_naming_the_stages if {
	denied({"fleeet.dev/approve": "0a1b2c3d4e/prod-us"}, `stage "prod-us" is not one of spec.rollout.stages ["canary", "prod-eu"]`)
}

test_malformed_undo_is_refused_with_the_form if {
	every v in ["0A1B2C3D4E", "0a1b2c3d4e ", "*", "", "0a1b2c3d4e/canary"] {
		denied({"fleeet.dev/undo": v}, "is not of the form <revision>")
	}
}

test_an_unchanged_value_is_not_judged_again if {
	inp := object.union(module({"fleeet.dev/approve": "0a1b2c3d4e/gone"}), {"oldObject": {"metadata": {"annotations": {"fleeet.dev/approve": "0a1b2c3d4e/gone"}}}})
	count(approvals.deny) == 0 with input as inp
}

test_the_manager_and_other_kinds_are_not_judged if {
	count(approvals.deny) == 0 with input as object.union(module({"fleeet.dev/approve": "x"}), {"request": {"userInfo": {"username": "manager"}}})
	count(approvals.deny) == 0 with input as object.union(module({"fleeet.dev/approve": "x"}), {"request": {"kind": {"kind": "Remote"}}})
}

test_a_pause_that_could_forge_a_line_or_says_nothing_is_refused if {
	every v in ["freeze\nReady: True", "tab\there", "caf\u00e9", "\u202eesrever", ""] {
		denied({"fleeet.dev/pause": v}, "must be non-empty printable ASCII")
	}
}
