# Only the manager writes ProxyAssemblage specs. The status of a
# ProxyAssemblage or Remote is written by the manager or by the identity of
# that very cluster (fleeet-remote-<name>, matched exactly, never by prefix;
# a plan split over several ProxyAssemblages names its further parts
# <name>.p1 to <name>.p7, and they are that cluster's too).
package fleeet.proxyassemblage

import data.fleeet.lib

# The Remote whose plan the object is (part of): a further part's name
# without its .p1 to .p7, any other name as it is.
remote_of(name) := regex.replace(name, `[.]p[1-7]$`, "") if lib.kind == "ProxyAssemblage"

remote_of(name) := name if lib.kind != "ProxyAssemblage"

own_cluster if {
	lib.cluster_identity
	lib.cluster_name == remote_of(input.request.name)
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
	msg := sprintf("status: the status of %s %s is written only by the fleet manager and by cluster identity fleeet-remote-%s, not by %s", [lib.kind, input.request.name, remote_of(input.request.name), lib.user])
}

deny contains msg if {
	own_cluster
	object.get(input, ["context", "remote"], null) == null
	msg := sprintf("status: Remote %s behind this identity no longer exists; the cluster is revoked", [input.request.name])
}
