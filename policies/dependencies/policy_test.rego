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
