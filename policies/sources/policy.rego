# Sources are fetched over https, ssh or oci. Plain http only where the
# tenant namespace carries the annotation fleeet.dev/allow-insecure-http: "true".
package fleeet.sources

import data.fleeet.lib

secure := {"https", "ssh", "oci"}

urls[path] := url if {
	lib.kind in lib.placement_kinds
	some s in ["git", "helm", "oci"]
	url := input.object.spec.sync.source[s].url
	path := sprintf("spec.sync.source.%s.url", [s])
}

scheme(url) := lower(parts[0]) if {
	parts := split(url, "://")
	count(parts) > 1
}

# scp-like git addresses (git@host:org/repo.git) are ssh.
else := "ssh" if regex.match(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:`, url)

else := ""

http_allowed if input.namespace.annotations["fleeet.dev/allow-insecure-http"] == "true"

deny contains msg if {
	some path, url in urls
	s := scheme(url)
	not s in secure
	not http_exception(s)
	msg := sprintf("%s: scheme %q is not allowed; use https, ssh or oci%s", [path, s, http_hint(s)])
}

http_exception("http") if http_allowed

deny contains msg if {
	lib.kind in lib.placement_kinds
	input.object.spec.sync.source.oci.insecure == true
	not http_allowed
	msg := sprintf("spec.sync.source.oci.insecure: plain http is not allowed%s", [http_hint("http")])
}

http_hint(s) := " (or annotate the tenant namespace fleeet.dev/allow-insecure-http: \"true\")" if s == "http"

else := ""

# Credentials never travel in a source URL: they would be copied into every
# plan and every cluster's Flux objects. An ssh user name (git@) is not a
# secret; anything before @ in an https, http or oci URL, and a password in
# any URL, is.
userinfo(url) := parts[1] if {
	parts := regex.find_all_string_submatch_n(`^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)@`, url, 1)[0]
}

credentials_in(url) if {
	info := userinfo(url)
	scheme(url) != "ssh"
	info != ""
}

credentials_in(url) if contains(userinfo(url), ":")

deny contains msg if {
	some path, url in urls
	credentials_in(url)
	msg := sprintf("%s: carries credentials before the host; remove them and name a Secret that holds them in spec.sync.source.secretRef", [path])
}

# Flux fetches sources inside the clusters, where a link-local or metadata
# address answers with the node's cloud credentials. The webhook judges
# each source URL's host against the manager's --source-networks-deny and
# lists what it refuses in context.sourceHosts; hosts named by a DNS name
# are resolved downstream, out of its sight.
deny contains msg if {
	some p in input.context.sourceHosts
	msg := sprintf("%s: %s; sources are fetched inside the clusters, where such an address serves instance metadata and credentials", [p.field, p.error])
}
