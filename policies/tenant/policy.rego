# fleeet objects live only in tenant namespaces: namespaces labelled
# fleeet.dev/tenant=true (any other value, "false" included, is not a
# tenant). The manager may still write status anywhere, so objects
# created before a namespace lost its label keep reporting. A delete (only
# CompiledSyncs' reach the webhook) places nothing anywhere, so it is not
# judged here: what was left in a namespace that lost its label can go.
package fleeet.tenant

import data.fleeet.lib

tenant_namespace if input.namespace.labels["fleeet.dev/tenant"] == "true"

deny contains msg if {
	not lib.deletes
	not tenant_namespace
	not lib.manager
	msg := sprintf("metadata.namespace: %s is not a tenant namespace; fleeet objects live only in namespaces labelled fleeet.dev/tenant=true", [input.request.namespace])
}
