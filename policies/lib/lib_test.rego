package fleeet.lib_test

import data.fleeet.lib

test_selects_match_labels_and_expressions if {
	lib.selects({"matchLabels": {"tier": "crds"}, "matchExpressions": [
		{"key": "env", "operator": "In", "values": ["prod"]},
		{"key": "zone", "operator": "NotIn", "values": ["a"]},
		{"key": "env", "operator": "Exists"},
		{"key": "legacy", "operator": "DoesNotExist"},
	]}, {"tier": "crds", "env": "prod"})
}

test_selects_rejects_mismatch if {
	not lib.selects({"matchLabels": {"tier": "crds"}}, {"tier": "apps"})
	not lib.selects({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}, {})
	not lib.selects({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}, {"env": "x"})
}

test_identities if {
	lib.registrant with input as {"request": {"namespace": "t", "userInfo": {"username": "system:serviceaccount:t:fleeet-registration-a"}}}
	lib.cluster_name == "edge" with input as {"request": {"namespace": "t", "userInfo": {"username": "system:serviceaccount:t:fleeet-remote-edge"}}}
	not lib.registrant with input as {"request": {"namespace": "u", "userInfo": {"username": "system:serviceaccount:t:fleeet-registration-a"}}}
}

test_reserved_keys if {
	lib.reserved_key("fleeet.dev/tenant")
	lib.reserved_key("policy.fleeet.dev/x")
	not lib.reserved_key("example.com/fleeet.dev")
}

test_syncs_are_content_and_whole_plan_entries if {
	sync := {"name": "app", "source": {"git": {"url": "https://git.example.com/app.git", "tag": "v1"}}}
	lib.syncs == {sync} with input as {"request": {"kind": {"kind": "CompiledSync"}, "operation": "CREATE"}, "object": {"sync": sync}}
	lib.syncs == {sync} with input as {
		"request": {"kind": {"kind": "ProxyAssemblage"}, "operation": "UPDATE", "subResource": ""},
		"object": {"spec": {"assemblage": {"syncs": [sync, {"name": "web", "content": "web-0123456789abcdef0123"}]}}},
	}
}

test_syncs_of_deletes_status_and_empty_plans_are_none if {
	count(lib.syncs) == 0 with input as {"request": {"kind": {"kind": "CompiledSync"}, "operation": "DELETE"}, "object": null}
	count(lib.syncs) == 0 with input as {
		"request": {"kind": {"kind": "ProxyAssemblage"}, "operation": "UPDATE", "subResource": "status"},
		"object": {"spec": {"assemblage": {"syncs": [{"name": "app"}]}}},
	}
	count(lib.syncs) == 0 with input as {"request": {"kind": {"kind": "ProxyAssemblage"}, "operation": "CREATE", "subResource": ""}, "object": {"spec": {"assemblage": {}}}}
	count(lib.syncs) == 0 with input as {"request": {"kind": {"kind": "Module"}, "operation": "CREATE"}, "object": {"spec": {"sync": {}}}}
}
