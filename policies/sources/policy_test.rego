package fleeet.sources_test

import data.fleeet.sources

module(source, annotations) := {
	"request": {"kind": {"kind": "Module"}},
	"namespace": {"annotations": annotations},
	"object": {"spec": {"sync": {"source": source}}},
}

test_secure_schemes_allowed if {
	every url in ["https://git.example.com/a.git", "ssh://git@example.com/a.git", "git@example.com:org/a.git", "oci://ghcr.io/x"] {
		count(sources.deny) == 0 with input as module({"git": {"url": url}}, {})
	}
}

test_http_denied_with_hint if {
	sources.deny == {`spec.sync.source.helm.url: scheme "http" is not allowed; use https, ssh or oci (or annotate the tenant namespace fleeet.dev/allow-insecure-http: "true")`} with input as module({"helm": {"url": "http://charts.example.com"}}, {})
}

test_http_allowed_by_annotation if {
	count(sources.deny) == 0 with input as module({"helm": {"url": "http://charts"}}, {"fleeet.dev/allow-insecure-http": "true"})
}

test_insecure_oci_only_by_annotation if {
	inp := {"oci": {"url": "oci://registry.local/charts/app", "insecure": true}}
	sources.deny == {`spec.sync.source.oci.insecure: plain http is not allowed (or annotate the tenant namespace fleeet.dev/allow-insecure-http: "true")`} with input as module(inp, {})
	count(sources.deny) == 0 with input as module(inp, {"fleeet.dev/allow-insecure-http": "true"})
}

test_other_schemes_denied if {
	sources.deny == {`spec.sync.source.git.url: scheme "file" is not allowed; use https, ssh or oci`} with input as module({"git": {"url": "file:///etc"}}, {})
	sources.deny == {`spec.sync.source.git.url: scheme "" is not allowed; use https, ssh or oci`} with input as module({"git": {"url": "/local/path"}}, {})
}

test_credentials_in_url_denied if {
	every url in ["https://user:token@git.example.com/a.git", "https://token@git.example.com/a.git", "oci://u:p@ghcr.io/x", "ssh://git:pw@example.com/a.git"] {
		sources.deny == {"spec.sync.source.git.url: carries credentials before the host; remove them and name a Secret that holds them in spec.sync.source.secretRef"} with input as module({"git": {"url": url}}, {})
	}
}

test_ssh_user_and_at_sign_in_path_allowed if {
	every url in ["ssh://git@example.com/a.git", "https://example.com/org/a@b.git", "git@example.com:org/a.git"] {
		count(sources.deny) == 0 with input as module({"git": {"url": url}}, {})
	}
}

test_hosts_the_webhook_refuses_are_denied if {
	refused := {"field": "spec.sync.source.git.url", "error": "169.254.169.254 lies in 169.254.0.0/16, a denied network (--source-networks-deny)"}
	sources.deny == {"spec.sync.source.git.url: 169.254.169.254 lies in 169.254.0.0/16, a denied network (--source-networks-deny); sources are fetched inside the clusters, where such an address serves instance metadata and credentials"} with input as object.union(module({"git": {"url": "https://169.254.169.254/a.git"}}, {}), {"context": {"sourceHosts": [refused]}})
}

test_no_refused_hosts_no_denial if {
	count(sources.deny) == 0 with input as object.union(module({"git": {"url": "https://git.example.com/a.git"}}, {}), {"context": {"sourceHosts": []}})
}

test_oci_source_credentials_denied if {
	sources.deny == {"spec.sync.source.oci.url: carries credentials before the host; remove them and name a Secret that holds them in spec.sync.source.secretRef"} with input as module({"oci": {"url": "oci://u:p@ghcr.io/x"}}, {})
}
