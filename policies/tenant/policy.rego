# fleeet objects live only in tenant namespaces: namespaces labelled
# fleeet.dev/tenant. The manager may still write status anywhere, so objects
# created before a namespace lost its label keep reporting.
package fleeet.tenant

import data.fleeet.lib

deny contains msg if {
	not input.namespace.labels["fleeet.dev/tenant"]
	not lib.manager
	msg := sprintf("metadata.namespace: %s is not a tenant namespace; fleeet objects live only in namespaces labelled fleeet.dev/tenant", [input.request.namespace])
}
