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
