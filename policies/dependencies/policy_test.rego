package fleeet.dependencies_test

import data.fleeet.dependencies

module(name, labels, deps) := {"metadata": {"name": name, "labels": labels}, "spec": {"sync": {"dependsOn": deps}}}

req(object, others) := {"request": {"kind": {"kind": "Module"}}, "object": object, "context": {"modules": others}}

test_chain_allowed if {
	others := [module("a", {}, []), module("b", {}, [{"name": "a"}])]
	count(dependencies.deny) == 0 with input as req(module("c", {}, [{"name": "b"}]), others)
}

test_cycle_named if {
	others := [module("a", {}, [{"name": "c"}]), module("b", {}, [{"name": "a"}])]
	dependencies.deny == {"spec.sync.dependsOn: creates the dependency cycle c → b → a → c"} with input as req(module("c", {}, [{"name": "b"}]), others)
}

test_cycle_through_selector if {
	others := [module("crds", {"tier": "platform"}, [{"selector": {"matchLabels": {"tier": "app"}}}])]
	dependencies.deny == {"spec.sync.dependsOn: creates the dependency cycle web → crds → web"} with input as req(module("web", {"tier": "app"}, [{"selector": {"matchLabels": {"tier": "platform"}}}]), others)
}

test_self_dependency if {
	dependencies.deny == {"spec.sync.dependsOn: creates the dependency cycle a → a"} with input as req(module("a", {}, [{"name": "a"}]), [])
}

test_status_write_of_a_module_in_a_cycle_allowed if {
	others := [module("a", {}, [{"name": "c"}])]
	count(dependencies.deny) == 0 with input as {"request": {"kind": {"kind": "Module"}, "subResource": "status"}, "object": module("c", {}, [{"name": "a"}]), "context": {"modules": others}}
}

prerequisite(name, labels, selector) := {"metadata": {"name": name, "labels": labels}, "spec": {"sync": {"requiredBy": selector}}}

test_required_by_everything_allowed_once if {
	others := [module("web", {"tier": "app"}, []), module("db", {}, [])]
	count(dependencies.deny) == 0 with input as req(prerequisite("cni", {}, {}), others)
}

test_two_modules_required_by_everything_are_a_cycle if {
	others := [prerequisite("cni", {}, {})]
	dependencies.deny == {"spec.sync.requiredBy: creates the dependency cycle csi → cni → csi"} with input as req(prerequisite("csi", {}, {}), others)
}

test_labels_a_requirement_selects_can_close_a_cycle if {
	cni := {"metadata": {"name": "cni", "labels": {}}, "spec": {"sync": {"requiredBy": {"matchLabels": {"tier": "app"}}, "dependsOn": [{"name": "db"}]}}}
	object := {"metadata": {"name": "db", "labels": {"tier": "app"}}, "spec": {"sync": {}}}
	dependencies.deny == {"metadata.labels: creates the dependency cycle db → cni → db"} with input as req(object, [cni])
}

test_a_module_a_requirement_selects_may_depend_on_it_too if {
	others := [prerequisite("cni", {}, {"matchLabels": {"tier": "app"}})]
	count(dependencies.deny) == 0 with input as req(module("web", {"tier": "app"}, [{"name": "cni"}]), others)
}

with_expr(expr) := {"metadata": {"name": "web"}, "spec": {"sync": {"dependsOn": [{"name": "db", "readyExpr": expr}]}}}

test_a_ready_expr_that_does_not_compile_is_refused_naming_its_field if {
	problems := [{"field": "spec.sync.dependsOn[0].readyExpr", "error": "undeclared reference to 'self'"}]
	dependencies.deny == {"spec.sync.dependsOn[0].readyExpr: undeclared reference to 'self'"} with input as {
		"request": {"kind": {"kind": "Module"}}, "object": with_expr("self.ready"),
		"context": {"modules": [], "readyExprs": problems},
	}
}

test_a_ready_expr_that_compiles_is_allowed if {
	count(dependencies.deny) == 0 with input as {
		"request": {"kind": {"kind": "BootstrapModule"}}, "object": with_expr("dep.status.ready"),
		"context": {"readyExprs": []},
	}
}

test_a_ready_expr_not_checked_by_the_webhook_is_refused if {
	some msg in dependencies.deny with input as {"request": {"kind": {"kind": "Module"}}, "object": with_expr("dep.status.ready"), "context": {"modules": []}}
	startswith(msg, "spec.sync.dependsOn: the webhook did not check the readyExprs")
}
