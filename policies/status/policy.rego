# Only the manager writes the status of Modules and BootstrapModules: it is
# the fleet's account of a rollout, read by people and by fleetctl, and a
# tenant who could write it could report a rollout done that never ran.
# (ProxyAssemblage and Remote status: see proxyassemblage; RegistrationToken
# status: see registration.)
package fleeet.status

import data.fleeet.lib

deny contains msg if {
	lib.kind in lib.placement_kinds
	input.request.subResource == "status"
	not lib.manager
	msg := sprintf("status: the status of %s %s is written only by the fleet manager, not by %s", [lib.kind, input.request.name, lib.user])
}
