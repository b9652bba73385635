package fleeet.windows_test

import data.fleeet.windows

module := {
	"request": {"kind": {"kind": "Module"}, "subResource": "", "operation": "CREATE", "userInfo": {"username": "alice"}},
	"object": {"spec": {"rollout": {"windows": [{"schedule": "0 0 30 2 *", "duration": "1h"}]}}},
}

test_a_window_that_never_opens_is_refused_naming_the_field if {
	msg := "spec.rollout.windows[0].schedule: \"0 0 30 2 *\" never opens"
	windows.deny[msg] with input as object.union(module, {"context": {"windows": [{"field": "spec.rollout.windows[0].schedule", "error": "\"0 0 30 2 *\" never opens"}]}})
}

test_windows_that_open_pass if {
	count(windows.deny) == 0 with input as object.union(module, {"context": {"windows": []}})
}

test_unchecked_windows_are_refused if {
	some msg in windows.deny with input as module
	startswith(msg, "spec.rollout.windows: ")
}

test_status_writes_are_not_judged if {
	count(windows.deny) == 0 with input as object.union(module, {"request": {"subResource": "status"}})
}

test_other_kinds_are_not_judged if {
	count(windows.deny) == 0 with input as object.union(module, {"request": {"kind": {"kind": "Remote"}}})
}
