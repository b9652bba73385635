package fleeet.references_test

import data.fleeet.references

obj(spec) := {"request": {"namespace": "team-a", "kind": {"kind": "Module"}}, "object": {"spec": spec}}

test_compiled_plans_are_not_walked_again if {
	count(references.deny) == 0 with input as {
		"request": {"namespace": "team-a", "kind": {"kind": "ProxyAssemblage"}},
		"object": {"spec": {"ref": {"namespace": "team-b"}}},
	}
}

test_status_writes_are_not_walked if {
	count(references.deny) == 0 with input as {
		"request": {"namespace": "team-a", "kind": {"kind": "Remote"}, "subResource": "status"},
		"object": {"spec": {"ref": {"namespace": "team-b"}}},
	}
}

test_same_namespace_allowed if {
	count(references.deny) == 0 with input as obj({"ref": {"name": "x", "namespace": "team-a"}})
}

test_other_namespace_denied if {
	references.deny == {`spec.ref.namespace: refers to namespace "team-b"; references must stay in namespace team-a`} with input as obj({"ref": {"namespace": "team-b"}})
}

test_helm_values_are_data if {
	count(references.deny) == 0 with input as obj({"sync": {"package": {"helm": {"values": {"namespace": "elsewhere"}}}}})
}

test_list_paths_are_named if {
	some msg in references.deny with input as obj({"items": [{"namespace": "b"}]})
	startswith(msg, "spec.items.0.namespace:")
}

test_substitute_is_data if {
	count(references.deny) == 0 with input as obj({"sync": {"package": {"kustomize": {"substitute": {"namespace": "elsewhere"}}}}})
}

test_a_namespace_beside_the_free_form_data_is_still_judged if {
	references.deny == {`spec.sync.package.helm.namespace: refers to namespace "b"; references must stay in namespace team-a`} with input as obj({"sync": {"package": {"helm": {"namespace": "b", "values": {}}}}})
}

test_patch_targets_select_rather_than_refer if {
	count(references.deny) == 0 with input as obj({"sync": {"package": {"kustomize": {"patches": [{"patch": "x", "target": {"namespace": "platform"}}]}}}})
}

test_overrides_data_and_patches_are_not_references if {
	count(references.deny) == 0 with input as obj({"overrides": [
		{"name": "eu", "helm": {"values": {"namespace": "elsewhere"}}},
		{"name": "us", "kustomize": {"substitute": {"namespace": "x"}, "patches": [{"patch": "y", "target": {"namespace": "z"}}]}},
	]})
}

test_a_namespace_elsewhere_in_an_override_is_still_judged if {
	references.deny == {`spec.overrides.0.selector.namespace: refers to namespace "b"; references must stay in namespace team-a`} with input as obj({"overrides": [{"name": "eu", "selector": {"namespace": "b"}, "helm": {"values": {}}}]})
}
