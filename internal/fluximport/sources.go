package fluximport

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/versions"
)

// lookup finds the source ref names, of one of kinds, among the
// checkout's; a source of another namespace is inlined like any other.
func (i *importer) lookup(o *object, field string, ref sourceRef, c *conversion, kinds ...string) *object {
	ns := ref.Namespace
	if ns == "" {
		ns = o.Metadata.Namespace
	}
	name := ref.Kind + " " + qualified(ns, ref.Name)
	src := i.sources[ref.Kind+"/"+ns+"/"+ref.Name]
	switch {
	case !slices.Contains(kinds, ref.Kind):
		c.refuse("%s: a %s source cannot be converted; a Module's source is %s", field, ref.Kind, strings.Join(kinds, " or "))
		return nil
	case src == nil:
		c.refuse("%s: %s is not in the directory", field, name)
		return nil
	case ns != o.Metadata.Namespace:
		c.rewrite("%s: %s of another namespace is inlined into the Module", field, name)
	}
	c.sources = append(c.sources, src.key())
	return src
}

// gitRepositorySpec holds the fields of a GitRepository's spec a Module
// says.
type gitRepositorySpec struct {
	URL       string                         `json:"url"`
	Ref       *gitRef                        `json:"ref"`
	SecretRef *fleeetv1.LocalObjectReference `json:"secretRef"`
	Ignore    *string                        `json:"ignore"`
}

// gitRef is a GitRepository's spec.ref.
type gitRef struct {
	Branch string `json:"branch"`
	Tag    string `json:"tag"`
	Semver string `json:"semver"`
	Name   string `json:"name"`
	Commit string `json:"commit"`
}

// The fields of sources: their interval and timeout are how often and how
// long Flux fetches, which the Module's sync interval says.
var (
	gitRepositoryFields = fields("url ref secretRef ignore interval timeout suspend", map[string]verdict{
		"include":           {refuse: whyNoField},
		"recurseSubmodules": {refuse: whyNoField},
		"sparseCheckout":    {refuse: whyNoField},
		"verify":            {refuse: "a Module does not verify commit signatures"},
		"provider":          {refuse: whySourceAuth},
		"proxySecretRef":    {refuse: whyNoField},
	})
	helmRepositoryFields = fields("url type secretRef certSecretRef interval timeout suspend", map[string]verdict{
		"passCredentials": {drop: "credentials go to the repository's host only"},
		"provider":        {refuse: whySourceAuth},
		"insecure":        {refuse: "a Module's helm source is read over TLS, or http:// where the tenant namespace allows it"},
	})
	ociRepositoryFields = fields("url ref secretRef certSecretRef insecure verify interval timeout suspend", map[string]verdict{
		"layerSelector":      {refuse: whyNoField},
		"ignore":             {refuse: whyNoField},
		"provider":           {refuse: whySourceAuth},
		"serviceAccountName": {refuse: whySourceAuth},
		"proxySecretRef":     {refuse: whyNoField},
	})
)

var fullCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

// gitSource converts a GitRepository, pinning what moves: a branch to the
// commit it holds now, a semver range to its highest tag now, kept as the
// Module's version policy.
func (i *importer) gitSource(ctx context.Context, src *object, c *conversion) (fleeetv1.Source, *fleeetv1.VersionPolicy) {
	at := src.Kind + " " + qualified(src.Metadata.Namespace, src.Metadata.Name) + " spec"
	var g gitRepositorySpec
	if !decode(src, at, &g, gitRepositoryFields, c) {
		return fleeetv1.Source{}, nil
	}
	out := fleeetv1.Source{Git: &fleeetv1.GitSource{URL: g.URL, Ignore: g.Ignore}, SecretRef: c.deliver(g.SecretRef)}
	if !strings.Contains(g.URL, "://") {
		c.refuse("%s.url %s: a Module's git URL is https://, http:// or ssh://", at, g.URL)
	}
	ref := g.Ref
	if ref == nil {
		ref = &gitRef{Branch: "master"} // Flux's default
	}
	return i.pinGit(ctx, out, at, at+".ref.branch", ref, c)
}

// pinGit points a git source at what ref names, pinning what moves: a
// branch (named by the field branchAt) to the commit it holds now, a
// semver range to its highest tag now, kept as the version policy.
func (i *importer) pinGit(ctx context.Context, out fleeetv1.Source, at, branchAt string, ref *gitRef, c *conversion) (fleeetv1.Source, *fleeetv1.VersionPolicy) {
	// Flux's precedence: commit, name, semver, tag, branch.
	branch := ref.Branch
	switch name := ref.Name; {
	case ref.Commit != "":
		if !fullCommit.MatchString(ref.Commit) {
			c.refuse("%s.ref.commit %s: a Module pins a full 40-hex commit", at, ref.Commit)
		}
		out.Git.Revision = ref.Commit
		return out, nil
	case strings.HasPrefix(name, "refs/tags/"):
		out.Git.Tag = name
		return out, nil
	case strings.HasPrefix(name, "refs/heads/"):
		branch = strings.TrimPrefix(name, "refs/heads/")
	case name != "":
		c.refuse("%s.ref.name %s: a Module pins a tag or a commit", at, name)
		return out, nil
	case ref.Semver != "":
		return i.resolve(ctx, out, at+".ref.semver", ref.Semver, c)
	case ref.Tag != "":
		out.Git.Tag = ref.Tag
		return out, nil
	}
	if why := versions.Unsupported(out); why != "" {
		c.refuse("%s %s: the import cannot read the branch's commit: %s", branchAt, branch, unsupported(why))
		return out, nil
	}
	commit, err := versions.GitRef(ctx, i.opts.HTTP, out.Git.URL, "refs/heads/"+branch)
	if err != nil {
		c.refuse("%s %s: %v", branchAt, branch, err)
		return out, nil
	}
	out.Git.Revision = commit
	c.rewrite("branch %s pinned to %s at import", branch, commit)
	return out, nil
}

// helmRepositorySpec holds the fields of a HelmRepository's spec a Module
// says.
type helmRepositorySpec struct {
	URL           string                         `json:"url"`
	Type          string                         `json:"type"`
	SecretRef     *fleeetv1.LocalObjectReference `json:"secretRef"`
	CertSecretRef *fleeetv1.LocalObjectReference `json:"certSecretRef"`
}

// helmSource converts a HelmRepository and a chart at version: an exact
// version is kept, a range resolved to its highest chart version now and
// kept as the Module's version policy.
func (i *importer) helmSource(ctx context.Context, src *object, chart, version string, c *conversion) (fleeetv1.Source, *fleeetv1.VersionPolicy) {
	at := src.Kind + " " + qualified(src.Metadata.Namespace, src.Metadata.Name) + " spec"
	var h helmRepositorySpec
	if !decode(src, at, &h, helmRepositoryFields, c) {
		return fleeetv1.Source{}, nil
	}
	out := fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: h.URL, Chart: chart, Version: version},
		SecretRef: c.deliver(h.SecretRef), CertSecretRef: c.deliver(h.CertSecretRef)}
	return i.pinChart(ctx, out, "spec.chart.spec.version", c)
}

// pinChart keeps a helm source's exact version and resolves a range (or
// no version: the latest) to its highest chart version now, kept as the
// version policy; field names the version.
func (i *importer) pinChart(ctx context.Context, out fleeetv1.Source, field string, c *conversion) (fleeetv1.Source, *fleeetv1.VersionPolicy) {
	version := out.Helm.Version
	if version == "" {
		version = "*" // Flux's and Fleet's default: the latest
	}
	if _, err := semver.StrictNewVersion(strings.TrimPrefix(version, "v")); err == nil {
		return out, nil
	}
	return i.resolve(ctx, out, field, version, c)
}

// resolve pins src to the highest version the semver constraint allows
// among those the source offers now, and keeps the constraint as the
// Module's version policy.
func (i *importer) resolve(ctx context.Context, src fleeetv1.Source, field, constraint string, c *conversion) (fleeetv1.Source, *fleeetv1.VersionPolicy) {
	policy := &fleeetv1.VersionPolicy{Semver: constraint}
	parsed, err := versions.Constraint(policy)
	if err != nil {
		c.refuse("%s %q: not a semantic version constraint", field, constraint)
		return src, nil
	}
	if why := versions.Unsupported(src); why != "" {
		c.refuse("%s %q: the range cannot be resolved: %s", field, constraint, unsupported(why))
		return src, nil
	}
	offered, err := versions.List(ctx, i.opts.HTTP, src)
	if err != nil {
		c.refuse("%s %q: %v", field, constraint, err)
		return src, nil
	}
	picked, ok := versions.Pick(offered, parsed, nil)
	if !ok {
		c.refuse("%s %q: no version the source offers satisfies it", field, constraint)
		return src, nil
	}
	versions.Set(&src, picked)
	c.rewrite("%s %q resolved to %s at import; spec.versionPolicy.semver keeps the range", field, constraint, picked)
	return src, policy
}

// ociRepositorySpec holds the fields of an OCIRepository's spec a Module
// says.
type ociRepositorySpec struct {
	URL string `json:"url"`
	Ref *struct {
		Tag    string `json:"tag"`
		Semver string `json:"semver"`
		Digest string `json:"digest"`
	} `json:"ref"`
	SecretRef     *fleeetv1.LocalObjectReference `json:"secretRef"`
	CertSecretRef *fleeetv1.LocalObjectReference `json:"certSecretRef"`
	Insecure      bool                           `json:"insecure"`
	Verify        *struct {
		Provider  string                         `json:"provider"`
		SecretRef *fleeetv1.LocalObjectReference `json:"secretRef"`
	} `json:"verify"`
}

// ociSource converts an OCIRepository at a tag or digest, or a semver
// range of tags resolved to its highest tag now and kept as the version
// policy.
func (i *importer) ociSource(ctx context.Context, src *object, c *conversion) (fleeetv1.Source, *fleeetv1.VersionPolicy) {
	at := src.Kind + " " + qualified(src.Metadata.Namespace, src.Metadata.Name) + " spec"
	var o ociRepositorySpec
	if !decode(src, at, &o, ociRepositoryFields, c) {
		return fleeetv1.Source{}, nil
	}
	out := fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: o.URL, Insecure: o.Insecure},
		SecretRef: c.deliver(o.SecretRef), CertSecretRef: c.deliver(o.CertSecretRef)}
	var policy *fleeetv1.VersionPolicy
	switch ref := o.Ref; {
	case ref != nil && ref.Digest != "":
		out.OCI.Digest = ref.Digest
	case ref != nil && ref.Semver != "":
		out, policy = i.resolve(ctx, out, at+".ref.semver", ref.Semver, c)
	case ref == nil || ref.Tag == "" || ref.Tag == "latest":
		c.refuse("%s.ref: latest moves; pin a tag or a digest", at)
	default:
		out.OCI.Tag = ref.Tag
	}
	if v := o.Verify; v != nil {
		if v.Provider != "cosign" || v.SecretRef == nil {
			c.refuse("%s.verify: a Module verifies cosign signatures with the public keys of a Secret only", at)
		} else {
			out.OCI.Verify = &fleeetv1.OCIVerification{SecretRef: *c.deliver(v.SecretRef)}
		}
	}
	return out, policy
}

// decode judges a source's fields by table and decodes its spec into v.
func decode(src *object, at string, v any, table map[string]verdict, c *conversion) bool {
	c.check(at, src.Spec, table)
	if err := json.Unmarshal(src.Spec, v); err != nil {
		c.refuse("%s: %v", at, err)
		return false
	}
	return true
}

// unsupported rewords versions.Unsupported's reason, which names the
// Module's field, for the source it came from.
func unsupported(why string) string {
	_, reason, _ := strings.Cut(why, ": ")
	return reason
}
