# Syncs pin exact versions: a git tag or a full commit, never a branch or a
# pattern; a Helm chart at an exact semantic version, never a range; an OCI
# artifact at a tag that does not move or a sha256 digest.
package fleeet.versions

import data.fleeet.lib

semver := `^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`

sync := input.object.spec.sync if lib.kind in lib.placement_kinds

deny contains msg if {
	v := sync.source.helm.version
	not regex.match(semver, v)
	msg := sprintf("spec.sync.source.helm.version: %q is not an exact version; name one release such as 1.4.2 (ranges like ^1.4, ~1.4 or 1.x are not allowed)", [v])
}

deny contains msg if {
	tag := sync.source.git.tag
	moving_tag(tag)
	msg := sprintf("spec.sync.source.git.tag: %q names a branch or a pattern, not one tag", [tag])
}

deny contains msg if {
	rev := sync.source.git.revision
	not regex.match(`^[0-9a-f]{40}$`, rev)
	msg := sprintf("spec.sync.source.git.revision: %q is not a full 40-character commit hash", [rev])
}

deny contains "spec.sync.source.git: name a tag or a revision; a sync never follows a branch" if {
	sync.source.git
	not sync.source.git.tag
	not sync.source.git.revision
}

moving_tag(tag) if startswith(tag, "refs/heads/")

moving_tag(tag) if regex.match(`[*?^~\[\] ]`, tag)

moving_tag(tag) if lower(tag) in {"head", "latest", "main", "master"}

deny contains msg if {
	tag := sync.source.oci.tag
	moving_tag(tag)
	msg := sprintf("spec.sync.source.oci.tag: %q moves; name an exact tag or a digest", [tag])
}

deny contains msg if {
	d := sync.source.oci.digest
	not regex.match(`^sha256:[0-9a-f]{64}$`, d)
	msg := sprintf("spec.sync.source.oci.digest: %q is not sha256: followed by 64 hex characters", [d])
}

deny contains "spec.sync.source.oci: name a tag or a digest; a sync never follows latest" if {
	sync.source.oci
	not sync.source.oci.tag
	not sync.source.oci.digest
}

# A version policy lets the manager pick the sync's version among those the
# source offers; the version it writes is exact, so the rules above still
# hold for it. Rego has no semver constraints, so the webhook parses the
# policy and lists what the manager could not act on in
# context.versionPolicy ({error}); a policy that was not worked out is
# refused (fail closed).
version_policy_judged if {
	lib.kind == "Module"
	input.request.subResource == ""
	input.object.spec.versionPolicy
}

deny contains p.error if {
	version_policy_judged
	some p in input.context.versionPolicy
}

deny contains "spec.versionPolicy: the webhook did not check the version policy; refusing rather than admitting one the manager cannot act on" if {
	version_policy_judged
	not input.context.versionPolicy
}
