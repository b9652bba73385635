# dependsOn across a namespace's Modules stays acyclic. A Module's sync is
# named after the Module; a dependency names a sync or selects syncs by the
# Modules' labels, and a Module's requiredBy makes the Modules it selects
# depend on it. input.context.modules holds the namespace's other Modules.
package fleeet.dependencies

import data.fleeet.lib

self := input.object.metadata.name

modules[m.metadata.name] := m if {
	lib.kind == "Module"
	some m in input.context.modules
	m.metadata.name != self
}

modules[self] := input.object if lib.kind == "Module"

edges[name] := {d |
	some dep in object.get(m, ["spec", "sync", "dependsOn"], [])
	some d in targets(dep)
} | {p |
	some p, prerequisite in modules
	p != name
	lib.selects(prerequisite.spec.sync.requiredBy, object.get(m, ["metadata", "labels"], {}))
} if {
	some name, m in modules
}

targets(dep) := {dep.name} if dep.name

targets(dep) := {other |
	some other, m in modules
	lib.selects(dep.selector, object.get(m, ["metadata", "labels"], {}))
} if dep.selector

# A status write leaves dependsOn as it was: judging it would stop the
# manager from reporting on a cycle that concurrent writes let through.
deny contains msg if {
	lib.kind == "Module"
	object.get(input.request, "subResource", "") == ""
	some path in graph.reachable_paths(edges, edges[self])
	some i, node in path
	node == self
	not self in array.slice(path, 0, i)
	cycle := array.concat([self], array.slice(path, 0, i + 1))
	msg := sprintf("%s: creates the dependency cycle %s", [field, concat(" → ", cycle)])
}

# The field that closes the cycle: the Module's own dependsOn, else its
# requiredBy, else its labels, which another Module's requiredBy selects.
field := "spec.sync.dependsOn" if {
	count(object.get(input.object, ["spec", "sync", "dependsOn"], [])) > 0
} else := "spec.sync.requiredBy" if {
	input.object.spec.sync.requiredBy
} else := "metadata.labels"

# A dependency's readyExpr is CEL, which Rego cannot parse: the webhook
# compiles each as the agent will and lists in context.readyExprs those
# that do not ({field, error}); expressions that were not worked out are
# refused (fail closed).
ready_exprs_judged if {
	lib.kind in {"Module", "BootstrapModule"}
	object.get(input.request, "subResource", "") == ""
	some d in object.get(input.object, ["spec", "sync", "dependsOn"], [])
	d.readyExpr
}

deny contains sprintf("%s: %s", [p.field, p.error]) if {
	ready_exprs_judged
	some p in input.context.readyExprs
}

deny contains "spec.sync.dependsOn: the webhook did not check the readyExprs; refusing rather than admitting one no agent can evaluate" if {
	ready_exprs_judged
	not input.context.readyExprs
}
