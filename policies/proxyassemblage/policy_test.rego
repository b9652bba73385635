package fleeet.proxyassemblage_test

import data.fleeet.proxyassemblage

req(kind, name, sub, user, remote) := {
	"request": {"kind": {"kind": kind}, "name": name, "namespace": "t", "subResource": sub, "userInfo": {"username": user}},
	"context": {"manager": {"username": "manager"}, "remote": remote},
}

test_manager_writes_plans if {
	count(proxyassemblage.deny) == 0 with input as req("ProxyAssemblage", "edge", "", "manager", null)
}

test_tenant_writing_plan_denied if {
	proxyassemblage.deny == {"spec: ProxyAssemblages are compiled by the fleet manager only; alice may not write edge"} with input as req("ProxyAssemblage", "edge", "", "alice", null)
}

test_own_cluster_writes_status if {
	count(proxyassemblage.deny) == 0 with input as req("ProxyAssemblage", "edge", "status", "system:serviceaccount:t:fleeet-remote-edge", {"metadata": {"name": "edge"}})
}

test_prefix_cluster_denied if {
	some msg in proxyassemblage.deny with input as req("ProxyAssemblage", "edge-1", "status", "system:serviceaccount:t:fleeet-remote-edge", {"metadata": {"name": "edge"}})
	startswith(msg, "status: the status of ProxyAssemblage edge-1 is written only by")
}

test_tenant_writing_remote_status_denied if {
	count(proxyassemblage.deny) == 1 with input as req("Remote", "edge", "status", "alice", null)
}

test_revoked_cluster_denied if {
	proxyassemblage.deny == {"status: Remote edge behind this identity no longer exists; the cluster is revoked"} with input as req("Remote", "edge", "status", "system:serviceaccount:t:fleeet-remote-edge", null)
}

test_own_cluster_writes_the_status_of_its_plans_parts if {
	count(proxyassemblage.deny) == 0 with input as req("ProxyAssemblage", "edge.p3", "status", "system:serviceaccount:t:fleeet-remote-edge", {"metadata": {"name": "edge"}})
}

test_another_clusters_part_is_refused if {
	proxyassemblage.deny == {"status: the status of ProxyAssemblage edge-1.p1 is written only by the fleet manager and by cluster identity fleeet-remote-edge-1, not by system:serviceaccount:t:fleeet-remote-edge"} with input as req("ProxyAssemblage", "edge-1.p1", "status", "system:serviceaccount:t:fleeet-remote-edge", {"metadata": {"name": "edge"}})
}

test_a_remote_named_like_a_part_is_not_stripped if {
	some msg in proxyassemblage.deny with input as req("Remote", "edge.p3", "status", "system:serviceaccount:t:fleeet-remote-edge", {"metadata": {"name": "edge"}})
	startswith(msg, "status: the status of Remote edge.p3 is written only by")
}

content(op, user, sync, old_sync) := {
	"request": {"operation": op, "kind": {"kind": "CompiledSync"}, "name": "web-0123", "namespace": "t", "subResource": "", "userInfo": {"username": user}},
	"object": object_or_null(op, sync),
	"oldObject": old_sync,
	"context": {"manager": {"username": "manager"}},
}

object_or_null("DELETE", _) := null

object_or_null(op, sync) := {"sync": sync} if op != "DELETE"

web := {"name": "web", "source": {"git": {"url": "https://git.example.com/web.git", "tag": "v1.2.0"}}}

web_v2 := object.union(web, {"source": {"git": {"tag": "v2.0.0"}}})

test_manager_creates_and_deletes_content if {
	count(proxyassemblage.deny) == 0 with input as content("CREATE", "manager", web, null)
	count(proxyassemblage.deny) == 0 with input as content("DELETE", "manager", null, {"sync": web})
}

test_tenant_writing_content_denied if {
	proxyassemblage.deny == {"sync: CompiledSyncs are compiled by the fleet manager only, and clusters deploy what they hold; alice may not write web-0123"} with input as content("CREATE", "alice", web, null)
	proxyassemblage.deny == {
		"sync: CompiledSyncs are compiled by the fleet manager only, and clusters deploy what they hold; alice may not write web-0123",
		"sync: CompiledSync web-0123 is immutable: plans name it by a hash of its sync, and clusters keep what they read once; compile a new CompiledSync instead",
	} with input as content("UPDATE", "alice", web_v2, {"sync": web})
}

test_tenant_deleting_content_denied if {
	proxyassemblage.deny == {"metadata.name: CompiledSync web-0123 is deleted by the fleet manager only, once no plan names it (a cluster whose plan names it could no longer read its plan); alice may not delete it"} with input as content("DELETE", "alice", null, {"sync": web})
}

test_cluster_deleting_content_denied if {
	count(proxyassemblage.deny) == 1 with input as content("DELETE", "system:serviceaccount:t:fleeet-remote-edge", null, {"sync": web})
}

test_kube_cleanup_deletes_content if {
	count(proxyassemblage.deny) == 0 with input as content("DELETE", "system:serviceaccount:kube-system:namespace-controller", null, {"sync": web})
	count(proxyassemblage.deny) == 0 with input as content("DELETE", "system:serviceaccount:kube-system:generic-garbage-collector", null, {"sync": web})
	count(proxyassemblage.deny) == 0 with input as content("DELETE", "system:kube-controller-manager", null, {"sync": web})
}

test_kube_cleanup_writes_no_content if {
	count(proxyassemblage.deny) == 1 with input as content("CREATE", "system:serviceaccount:kube-system:namespace-controller", web, null)
}

test_manager_changing_content_denied if {
	proxyassemblage.deny == {"sync: CompiledSync web-0123 is immutable: plans name it by a hash of its sync, and clusters keep what they read once; compile a new CompiledSync instead"} with input as content("UPDATE", "manager", web_v2, {"sync": web})
}

test_manager_update_keeping_the_sync_allowed if {
	count(proxyassemblage.deny) == 0 with input as content("UPDATE", "manager", web, {"sync": web})
}

plan_request(op, user, obj, old) := {
	"request": {"operation": op, "kind": {"kind": "CompiledPlan"}, "name": "plan-0123", "namespace": "t", "subResource": "", "userInfo": {"username": user}},
	"object": obj,
	"oldObject": old,
	"context": {"manager": {"username": "manager"}},
}

shared := {"spec": {"entries": [{"name": "web", "content": "web-0123"}], "compiled": {"web": "1/v1.2.0"}}}

test_manager_creates_and_deletes_compiled_plans if {
	count(proxyassemblage.deny) == 0 with input as plan_request("CREATE", "manager", shared, null)
	count(proxyassemblage.deny) == 0 with input as plan_request("DELETE", "manager", null, shared)
	count(proxyassemblage.deny) == 0 with input as plan_request("UPDATE", "manager", object.union(shared, {"metadata": {"annotations": {"a": "b"}}}), shared)
}

test_others_writing_compiled_plans_denied if {
	proxyassemblage.deny == {"spec: CompiledPlans are compiled by the fleet manager only, and clusters deploy what they hold; alice may not write plan-0123"} with input as plan_request("CREATE", "alice", shared, null)
	proxyassemblage.deny == {"metadata.name: CompiledPlan plan-0123 is deleted by the fleet manager only, once no plan names it (a cluster whose plan names it could no longer read its plan); system:serviceaccount:t:fleeet-remote-edge may not delete it"} with input as plan_request("DELETE", "system:serviceaccount:t:fleeet-remote-edge", null, shared)
}

test_compiled_plans_are_immutable if {
	proxyassemblage.deny == {"spec: CompiledPlan plan-0123 is immutable: plans name it by a hash of what it holds, and clusters keep what they read once; compile a new CompiledPlan instead"} with input as plan_request("UPDATE", "manager", {"spec": {"entries": []}}, shared)
}
