# A cluster identity (fleeet-remote-<name>) may mint tokens for itself, as
# its agent does to renew its credential, but no more: each token lives at
# most the credential lifetime and is bound to no object. Without this, the
# right to renew would let a cluster mint itself a credential of any
# lifetime, outliving every renewal the manager planned for. Pod-bound
# tokens are refused as well: the apiserver may extend their lifetime.
#
# The webhook sees only TokenRequests by cluster identities in tenant
# namespaces (matchConditions and namespaceSelector in the chart).
# input.context.limits.maxCredentialSeconds is the credential lifetime.
package fleeet.tokenrequests

import data.fleeet.lib

cluster_token if {
	lib.cluster_identity
	lib.kind == "TokenRequest"
}

deny contains msg if {
	cluster_token
	seconds := input.object.spec.expirationSeconds
	limit := input.context.limits.maxCredentialSeconds
	seconds > limit
	msg := sprintf("spec.expirationSeconds: a cluster identity's tokens live at most %s seconds, not %s; %s may not mint a longer one", [format_int(limit, 10), format_int(seconds, 10), lib.user])
}

deny contains msg if {
	cluster_token
	ref := input.object.spec.boundObjectRef
	ref != null
	msg := sprintf("spec.boundObjectRef: a cluster identity's tokens are bound to no object; %s may not bind one to %s %s", [lib.user, object.get(ref, "kind", ""), object.get(ref, "name", "")])
}
