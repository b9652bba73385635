# Only the manager writes ProxyAssemblage specs. The status of a
# ProxyAssemblage or Remote is written by the manager or by the identity of
# that very cluster (fleeet-remote-<name>, matched exactly, never by prefix).
package fleeet.proxyassemblage

import data.fleeet.lib

own_cluster if {
	lib.cluster_identity
	lib.cluster_name == input.request.name
}

deny contains msg if {
	lib.kind == "ProxyAssemblage"
	input.request.subResource == ""
	not lib.manager
	msg := sprintf("spec: ProxyAssemblages are compiled by the fleet manager only; %s may not write %s", [lib.user, input.request.name])
}

deny contains msg if {
	lib.kind in {"ProxyAssemblage", "Remote"}
	input.request.subResource == "status"
	not lib.manager
	not own_cluster
	msg := sprintf("status: the status of %s %s is written only by the fleet manager and by cluster identity fleeet-remote-%s, not by %s", [lib.kind, input.request.name, input.request.name, lib.user])
}

deny contains msg if {
	own_cluster
	object.get(input, ["context", "remote"], null) == null
	msg := sprintf("status: Remote %s behind this identity no longer exists; the cluster is revoked", [input.request.name])
}
