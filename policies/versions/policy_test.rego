package fleeet.versions_test

import data.fleeet.versions

module(source) := {"request": {"kind": {"kind": "Module"}}, "object": {"spec": {"sync": {"source": source}}}}

test_exact_versions_allowed if {
	count(versions.deny) == 0 with input as module({"helm": {"version": "1.4.2"}})
	count(versions.deny) == 0 with input as module({"git": {"tag": "v1.4.2"}})
	count(versions.deny) == 0 with input as module({"git": {"revision": "0123456789abcdef0123456789abcdef01234567"}})
}

test_helm_range_denied if {
	some msg in versions.deny with input as module({"helm": {"version": "^1.4"}})
	startswith(msg, `spec.sync.source.helm.version: "^1.4" is not an exact version`)
}

test_moving_tags_denied if {
	every tag in ["refs/heads/main", "v1.*", "latest", "main"] {
		count(versions.deny) == 1 with input as module({"git": {"tag": tag}})
	}
}

test_short_revision_denied if {
	versions.deny == {`spec.sync.source.git.revision: "abc123" is not a full 40-character commit hash`} with input as module({"git": {"revision": "abc123"}})
}

test_branchless_git_denied if {
	versions.deny == {"spec.sync.source.git: name a tag or a revision; a sync never follows a branch"} with input as module({"git": {"url": "https://x"}})
}

test_pinned_oci_allowed if {
	count(versions.deny) == 0 with input as module({"oci": {"tag": "1.4.2"}})
	count(versions.deny) == 0 with input as module({"oci": {"digest": concat("", ["sha256:", strings.replace_n({"x": "0123456789abcdef"}, "xxxx")])}})
}

test_moving_oci_tag_denied if {
	versions.deny == {`spec.sync.source.oci.tag: "latest" moves; name an exact tag or a digest`} with input as module({"oci": {"tag": "latest"}})
}

test_bad_oci_digest_denied if {
	versions.deny == {`spec.sync.source.oci.digest: "sha256:abc" is not sha256: followed by 64 hex characters`} with input as module({"oci": {"digest": "sha256:abc"}})
}

test_unpinned_oci_denied if {
	versions.deny == {"spec.sync.source.oci: name a tag or a digest; a sync never follows latest"} with input as module({"oci": {"url": "oci://r/app"}})
}

with_policy(source, problems) := {
	"request": {"kind": {"kind": "Module"}, "subResource": ""},
	"object": {"spec": {"sync": {"source": source}, "versionPolicy": {"semver": "~1.4"}}},
	"context": {"versionPolicy": problems},
}

test_a_version_policy_the_webhook_found_sound_passes if {
	count(versions.deny) == 0 with input as with_policy({"helm": {"version": "1.4.2"}}, [])
}

test_a_version_policy_problem_is_refused_as_the_webhook_words_it if {
	msg := `spec.versionPolicy.semver: "~~1" is not a semantic version constraint: improper constraint: ~~1`
	versions.deny == {msg} with input as with_policy({"git": {"tag": "v1.4.2"}}, [{"error": msg}])
}

test_an_unchecked_version_policy_is_refused if {
	some msg in versions.deny with input as object.remove(with_policy({"git": {"tag": "v1.4.2"}}, []), ["context"])
	startswith(msg, "spec.versionPolicy: the webhook did not check")
}

test_status_writes_are_not_judged_for_the_version_policy if {
	count(versions.deny) == 0 with input as object.union(
		object.remove(with_policy({"git": {"tag": "v1.4.2"}}, []), ["context"]),
		{"request": {"subResource": "status"}},
	)
}
