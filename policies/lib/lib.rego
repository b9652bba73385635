# Helpers every fleeet policy shares. No deny or warn rules here.
package fleeet.lib

# The admission request's kind, such as "Module".
kind := input.request.kind.kind

# The requester's username.
user := input.request.userInfo.username

# The request deletes its object (only CompiledSyncs' deletes reach the
# webhook): input.object is null, and the object is in input.oldObject.
deletes if input.request.operation == "DELETE"

# The fleet manager's own identity writes plans, labels and status.
manager if user == input.context.manager.username

sa_prefix := concat("", ["system:serviceaccount:", input.request.namespace, ":"])

# A RegistrationToken's identity in this namespace.
registrant if startswith(user, concat("", [sa_prefix, "fleeet-registration-"]))

# A registered cluster's identity in this namespace, and the Remote it is.
cluster_identity if startswith(user, concat("", [sa_prefix, "fleeet-remote-"]))

cluster_name := trim_prefix(user, concat("", [sa_prefix, "fleeet-remote-"])) if cluster_identity

# Kinds whose spec holds one sync.
placement_kinds := {"Module", "BootstrapModule"}

# The syncs this write carries whole, as clusters will run them: a
# CompiledSync's sync, and each entry of a plan (ProxyAssemblage spec) that
# names no CompiledSync (a push Remote's Module with control-plane bindings,
# or an agent that reads no CompiledSyncs). A plan entry that names one
# carries only the sync's name, the CompiledSync's and the Secrets delivered
# for it: its sync was judged once, here, when the CompiledSync was stored.
# A rule over what a sync holds reads these.
syncs contains input.object.sync if {
	kind == "CompiledSync"
	not deletes
}

syncs contains s if {
	kind == "ProxyAssemblage"
	object.get(input.request, "subResource", "") == ""
	some s in object.get(input.object, ["spec", "assemblage", "syncs"], [])
	object.get(s, "content", "") == ""
}

# Keys reserved for fleeet: fleeet.dev/… and any sub-domain of fleeet.dev.
reserved_key(k) if startswith(k, "fleeet.dev/")

reserved_key(k) if contains(k, ".fleeet.dev/")

# selects(selector, labels) is true when a Kubernetes label selector matches.
selects(selector, labels) if {
	every k, v in object.get(selector, "matchLabels", {}) {
		labels[k] == v
	}
	every e in object.get(selector, "matchExpressions", []) {
		expression_holds(e, labels)
	}
}

expression_holds(e, labels) if {
	e.operator == "In"
	labels[e.key] in e.values
}

expression_holds(e, labels) if {
	e.operator == "NotIn"
	not in_values(e, labels)
}

in_values(e, labels) if labels[e.key] in e.values

expression_holds(e, labels) if {
	e.operator == "Exists"
	labels[e.key]
}

expression_holds(e, labels) if {
	e.operator == "DoesNotExist"
	not labels[e.key]
}
