// Package versions reads the versions a Module's source offers — a git
// repository's tags, a Helm repository's chart versions, an OCI
// repository's tags (an OCI artifact's, or a chart's in an oci:// Helm
// repository) — and picks the one
// a version policy allows, so the manager can write it into the sync as an
// exact version. It also reads the commit a git branch holds (GitRef), for
// fleetctl import to pin a branch.
package versions

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// maxBody bounds what one look reads from a source: a git ref advertisement
// or a Helm repository index. Large public Helm indexes run to tens of MB.
const maxBody = 64 << 20

// Constraint parses a version policy's semver constraint, naming the field
// in its error.
func Constraint(p *fleeetv1.VersionPolicy) (*semver.Constraints, error) {
	c, err := semver.NewConstraint(p.Semver)
	if err != nil {
		return nil, fmt.Errorf("spec.versionPolicy.semver: %q is not a semantic version constraint: %w", p.Semver, err)
	}
	return c, nil
}

// privateSource is why a source with credentials is not read.
const privateSource = "spec.sync.source.secretRef: the manager reads public sources only; a private one's credentials are downstream"

// Check says each reason the manager cannot act on the version policy p
// of a sync of src, naming the field, or none when it can.
func Check(p *fleeetv1.VersionPolicy, src fleeetv1.Source) []string {
	var problems []string
	if p.DigestOf == "" {
		if _, err := Constraint(p); err != nil {
			problems = append(problems, err.Error())
		}
		return append(problems, unsupported(src)...)
	}
	if src.OCI == nil {
		problems = append(problems, "spec.versionPolicy.digestOf: follows an OCI artifact's tag; the sync's source is not spec.sync.source.oci")
	}
	if src.SecretRef != nil {
		problems = append(problems, privateSource)
	}
	return problems
}

// Offered returns what src offers under p, read through c: the versions
// a semver policy picks among, or the one digest the tag a digest-follow
// names holds now.
func Offered(ctx context.Context, c *http.Client, p *fleeetv1.VersionPolicy, src fleeetv1.Source) ([]string, error) {
	if p.DigestOf == "" {
		return List(ctx, c, src)
	}
	d, err := ociDigest(ctx, c, src.OCI.URL, p.DigestOf, src.OCI.Insecure)
	if err != nil {
		return nil, err
	}
	return []string{d}, nil
}

// Unsupported says why the manager cannot read the versions src offers, or
// "" when it can: git over http(s), Helm repositories over http(s) or
// oci://, and OCI artifacts by tag, all public.
func Unsupported(src fleeetv1.Source) string {
	return strings.Join(unsupported(src), "; ")
}

// unsupported lists each reason the manager cannot read the versions src
// offers (Unsupported).
func unsupported(src fleeetv1.Source) []string {
	var problems []string
	if src.Git != nil && src.Git.Revision != "" {
		problems = append(problems, "spec.sync.source.git.revision: a version policy picks among tags; the sync pins a commit")
	}
	if src.Git != nil && !httpURL(src.Git.URL) {
		problems = append(problems, "spec.sync.source.git.url: the manager reads a repository's tags over https:// or http:// only")
	}
	if src.Helm != nil && !httpURL(src.Helm.URL) && !strings.HasPrefix(src.Helm.URL, "oci://") {
		problems = append(problems, "spec.sync.source.helm.url: the manager reads chart versions from https://, http:// or oci:// repositories only")
	}
	if src.OCI != nil && src.OCI.Digest != "" {
		problems = append(problems, "spec.sync.source.oci.digest: a version policy picks among tags; the sync pins a digest")
	}
	if src.SecretRef != nil {
		problems = append(problems, privateSource)
	}
	return problems
}

func httpURL(raw string) bool {
	return strings.HasPrefix(raw, "https://") || strings.HasPrefix(raw, "http://")
}

// Current is the version the sync names now: its git tag, chart version,
// OCI tag or digest.
func Current(src fleeetv1.Source) string {
	switch {
	case src.Git != nil:
		return strings.TrimPrefix(src.Git.Tag, "refs/tags/")
	case src.Helm != nil:
		return src.Helm.Version
	case src.OCI != nil:
		return cmp.Or(src.OCI.Tag, src.OCI.Digest)
	}
	return ""
}

// Set makes src name version v, as Offered named it: its git tag, chart
// version, OCI tag, or OCI digest (in place of a tag).
func Set(src *fleeetv1.Source, v string) {
	switch {
	case src.Git != nil:
		src.Git.Tag = v
	case src.Helm != nil:
		src.Helm.Version = v
	case src.OCI != nil && digestPattern.MatchString(v):
		src.OCI.Tag, src.OCI.Digest = "", v
	case src.OCI != nil:
		src.OCI.Tag, src.OCI.Digest = v, ""
	}
}

// List returns the versions src offers, as the source names them (a git
// tag's name, a chart version), reading it through c.
func List(ctx context.Context, c *http.Client, src fleeetv1.Source) ([]string, error) {
	if why := Unsupported(src); why != "" {
		return nil, errors.New(why)
	}
	switch {
	case src.Git != nil:
		return gitTags(ctx, c, src.Git.URL)
	case src.OCI != nil:
		return ociTags(ctx, c, src.OCI.URL, src.OCI.Insecure)
	case strings.HasPrefix(src.Helm.URL, "oci://"):
		// helm push stores a chart at <repository>/<chart>, tagged with
		// its version.
		return ociTags(ctx, c, strings.TrimSuffix(src.Helm.URL, "/")+"/"+src.Helm.Chart, false)
	}
	return chartVersions(ctx, c, src.Helm.URL, src.Helm.Chart)
}

// gitTags reads the tags a repository advertises over git's smart HTTP
// protocol (the ref advertisement of git-upload-pack), without cloning.
func gitTags(ctx context.Context, c *http.Client, repo string) ([]string, error) {
	refs, err := gitRefs(ctx, c, repo)
	if err != nil {
		return nil, err
	}
	var tags []string
	for _, r := range refs {
		if tag, ok := strings.CutPrefix(r.name, "refs/tags/"); ok {
			tags = append(tags, tag)
		}
	}
	return tags, nil
}

// GitRef returns the commit a repository's ref (such as refs/heads/main)
// points at now, read from its ref advertisement over smart HTTP, so a
// branch can be pinned to the commit it holds.
func GitRef(ctx context.Context, c *http.Client, repo, ref string) (string, error) {
	refs, err := gitRefs(ctx, c, repo)
	if err != nil {
		return "", err
	}
	for _, r := range refs {
		if r.name == ref {
			return r.commit, nil
		}
	}
	return "", fmt.Errorf("%s has no ref %s", redacted(repo), ref)
}

// advertisedRef is one line of a ref advertisement.
type advertisedRef struct{ commit, name string }

// gitRefs reads the refs a repository advertises, in order, leaving out the
// peeled (^{}) lines of annotated tags.
func gitRefs(ctx context.Context, c *http.Client, repo string) ([]advertisedRef, error) {
	body, err := get(ctx, c, strings.TrimSuffix(repo, "/")+"/info/refs?service=git-upload-pack")
	if err != nil {
		return nil, err
	}
	var refs []advertisedRef
	r := bufio.NewReader(bytes.NewReader(body))
	for {
		line, err := pktLine(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the refs of %s: %w", redacted(repo), err)
		}
		// "<sha> <ref>" with capabilities after a NUL on the first ref.
		line, _, _ = strings.Cut(strings.TrimSuffix(line, "\n"), "\x00")
		commit, name, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || strings.HasSuffix(name, "^{}") {
			continue // the service line, or a peeled tag
		}
		refs = append(refs, advertisedRef{commit: commit, name: name})
	}
	return refs, nil
}

// pktLine reads one pkt-line's payload; a flush packet ("0000") gives "".
func pktLine(r *bufio.Reader) (string, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return "", errors.New("truncated pkt-line")
		}
		return "", err
	}
	n, err := strconv.ParseUint(string(size[:]), 16, 16)
	switch {
	case err != nil:
		return "", fmt.Errorf("not a git smart HTTP answer (pkt-line length %q)", size[:])
	case n == 0:
		return "", nil
	case n < 4:
		return "", fmt.Errorf("pkt-line length %d", n)
	}
	payload := make([]byte, n-4)
	if _, err := io.ReadFull(r, payload); err != nil {
		return "", errors.New("truncated pkt-line")
	}
	return string(payload), nil
}

// chartVersions reads the versions of chart from a Helm repository's
// index.yaml.
func chartVersions(ctx context.Context, c *http.Client, repo, chart string) ([]string, error) {
	body, err := get(ctx, c, strings.TrimSuffix(repo, "/")+"/index.yaml")
	if err != nil {
		return nil, err
	}
	var index struct {
		Entries map[string][]struct {
			Version string `json:"version"`
		} `json:"entries"`
	}
	if err := yaml.Unmarshal(body, &index); err != nil {
		return nil, fmt.Errorf("reading the index of %s: %w", repo, err)
	}
	entries, ok := index.Entries[chart]
	if !ok {
		return nil, fmt.Errorf("the index of %s has no chart %q", repo, chart)
	}
	versions := make([]string, 0, len(entries))
	for _, e := range entries {
		versions = append(versions, e.Version)
	}
	return versions, nil
}

// get reads u whole, up to maxBody, and fails on any status but 200.
func get(ctx context.Context, c *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	return read(resp, u)
}

// read reads the answer to a GET of u whole, up to maxBody, and fails on
// any status but 200; it closes the body.
func read(resp *http.Response, u string) ([]byte, error) {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", redacted(u), resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", redacted(u), err)
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("GET %s: the answer is over %d MiB", redacted(u), maxBody>>20)
	}
	return body, nil
}

// redacted is u without its query, which a look never needs to show.
func redacted(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "the source"
	}
	p.RawQuery, p.User = "", nil
	return p.String()
}

// Pick returns, among offered, the highest version that satisfies c and is
// not in skip, as the source names it, and whether there is one. Names
// that are not semantic versions (with or without a leading v) are
// ignored.
func Pick(offered []string, c *semver.Constraints, skip []string) (string, bool) {
	var best *semver.Version
	name := ""
	for _, o := range offered {
		v, err := semver.NewVersion(o)
		if err != nil || !c.Check(v) || slices.Contains(skip, o) {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best, name = v, o
		}
	}
	return name, best != nil
}

// RolledBack lists the versions whose rollout was rolled back, from a
// Module's history, newest first, at most max.
func RolledBack(history []fleeetv1.RolloutRecord, max int) []string {
	var out []string
	for _, h := range history {
		if h.Outcome == fleeetv1.RolloutRolledBack && !slices.Contains(out, h.Version) && len(out) < max {
			out = append(out, h.Version)
		}
	}
	return out
}
