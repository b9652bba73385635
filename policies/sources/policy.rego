# Sources are fetched over https, ssh or oci. Plain http only where the
# tenant namespace carries the annotation fleeet.dev/allow-insecure-http: "true".
package fleeet.sources

import data.fleeet.lib

secure := {"https", "ssh", "oci"}

urls[path] := url if {
	lib.kind in lib.placement_kinds
	some s in ["git", "helm"]
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

http_hint(s) := " (or annotate the tenant namespace fleeet.dev/allow-insecure-http: \"true\")" if s == "http"

else := ""
