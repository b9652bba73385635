# Only the manager writes ProxyAssemblage specs. The status of a
# ProxyAssemblage or Remote is written by the manager or by the identity of
# that very cluster (fleeet-remote-<name>, matched exactly, never by prefix;
# a plan split over several ProxyAssemblages names its further parts
# <name>.p1 to <name>.p7, and they are that cluster's too).
#
# CompiledSyncs are the content plans name (NamedSync.Content): only the
# manager creates, updates or deletes them, and not even the manager changes
# the sync one holds. A cluster reads a CompiledSync by the name its plan
# gives; whoever could write one would change what every plan naming it
# deploys, and whoever could delete one would leave those clusters unable to
# read their plans.
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

# The kube-controller-manager's garbage collector and namespace controller
# delete what a deleted namespace or owner leaves: refusing them would keep a
# tenant namespace terminating for ever. Only cluster admins can act as them
# (impersonation, or a token of a kube-system ServiceAccount).
kube_cleanup if lib.user in {
	"system:kube-controller-manager",
	"system:serviceaccount:kube-system:generic-garbage-collector",
	"system:serviceaccount:kube-system:namespace-controller",
}

# What the manager alone compiles, writes and deletes, and the fields each
# holds: a cluster whose plan names one reads what its plan holds from it.
compiled := {
	"CompiledSync": {"fields": ["sync"], "hash_of": "its sync"},
	"CompiledPlan": {"fields": ["spec"], "hash_of": "what it holds"},
}

deny contains msg if {
	some kind, c in compiled
	lib.kind == kind
	input.request.operation in {"CREATE", "UPDATE"}
	not lib.manager
	msg := sprintf("%s: %ss are compiled by the fleet manager only, and clusters deploy what they hold; %s may not write %s", [c.fields[0], kind, lib.user, input.request.name])
}

deny contains msg if {
	lib.kind in object.keys(compiled)
	lib.deletes
	not lib.manager
	not kube_cleanup
	msg := sprintf("metadata.name: %s %s is deleted by the fleet manager only, once no plan names it (a cluster whose plan names it could no longer read its plan); %s may not delete it", [lib.kind, input.request.name, lib.user])
}

deny contains msg if {
	some kind, c in compiled
	lib.kind == kind
	input.request.operation == "UPDATE"
	some field in c.fields
	object.get(input.object, field, null) != object.get(input.oldObject, field, null)
	msg := sprintf("%s: %s %s is immutable: plans name it by a hash of %s, and clusters keep what they read once; compile a new %s instead", [field, kind, input.request.name, c.hash_of, kind])
}
