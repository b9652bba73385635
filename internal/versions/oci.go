package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// digestPattern is a manifest digest a sync can pin.
var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// maxTagPages bounds how many pages of tags one look reads from an OCI
// registry: a registry that keeps answering with a next page is not
// followed for ever.
const maxTagPages = 50

// registry reads one OCI repository (oci://host/path) through the OCI
// distribution API. A registry that asks for a token, as public ones do
// for anonymous pulls, gets an anonymous one from the token service it
// names, over TLS unless insecure; no credentials are ever sent. insecure
// reads the registry over plain HTTP.
type registry struct {
	c        *http.Client
	ref      string
	base     *url.URL // https://host/v2/path
	insecure bool
	token    string
}

func newRegistry(c *http.Client, ref string, insecure bool) (*registry, error) {
	host, path, ok := strings.Cut(strings.TrimPrefix(ref, "oci://"), "/")
	if !ok || host == "" || path == "" {
		return nil, fmt.Errorf("%s is not oci://<registry>/<repository>", ref)
	}
	scheme := "https"
	if insecure {
		scheme = "http"
	}
	return &registry{c: c, ref: ref, base: &url.URL{Scheme: scheme, Host: host, Path: "/v2/" + path}, insecure: insecure}, nil
}

// do sends a request of u, taking an anonymous token first when the
// registry answers the first one with a Bearer challenge.
func (r *registry) do(ctx context.Context, method, u string, accept ...string) (*http.Response, error) {
	send := func() (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, u, nil)
		if err != nil {
			return nil, err
		}
		if r.token != "" {
			req.Header.Set("Authorization", "Bearer "+r.token)
		}
		for _, a := range accept {
			req.Header.Add("Accept", a)
		}
		return r.c.Do(req)
	}
	resp, err := send()
	if err != nil || resp.StatusCode != http.StatusUnauthorized || r.token != "" {
		return resp, err
	}
	challenge := resp.Header.Get("WWW-Authenticate")
	resp.Body.Close()
	if r.token, err = anonymousToken(ctx, r.c, challenge, r.insecure); err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.ref, err)
	}
	return send()
}

// ociTags reads the tags of the OCI repository at ref from the registry's
// tag list (/v2/<path>/tags/list), page by page.
func ociTags(ctx context.Context, c *http.Client, ref string, insecure bool) ([]string, error) {
	r, err := newRegistry(c, ref, insecure)
	if err != nil {
		return nil, err
	}
	next := r.base.JoinPath("tags", "list")
	var tags []string
	for page := 0; next != nil; page++ {
		if page == maxTagPages {
			return nil, fmt.Errorf("the tags of %s run past %d pages", ref, maxTagPages)
		}
		u := next.String()
		resp, err := r.do(ctx, http.MethodGet, u)
		if err != nil {
			return nil, err
		}
		link := resp.Header.Get("Link")
		body, err := read(resp, u)
		if err != nil {
			return nil, err
		}
		var list struct {
			Tags []string `json:"tags"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("reading the tags of %s: %w", ref, err)
		}
		tags = append(tags, list.Tags...)
		if next, err = nextPage(next, link); err != nil {
			return nil, fmt.Errorf("reading the tags of %s: %w", ref, err)
		}
	}
	return tags, nil
}

// manifestTypes are the manifests a tag may name, as Flux and Helm push
// them and as multi-platform images are.
var manifestTypes = []string{
	"application/vnd.oci.image.manifest.v1+json",
	"application/vnd.oci.image.index.v1+json",
	"application/vnd.docker.distribution.manifest.v2+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
}

// ociDigest reads the digest of the manifest tag names in the OCI
// repository at ref, from the registry's answer to a HEAD of it.
func ociDigest(ctx context.Context, c *http.Client, ref, tag string, insecure bool) (string, error) {
	r, err := newRegistry(c, ref, insecure)
	if err != nil {
		return "", err
	}
	u := r.base.JoinPath("manifests", tag).String()
	resp, err := r.do(ctx, http.MethodHead, u, manifestTypes...)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HEAD %s: %s", redacted(u), resp.Status)
	}
	d := resp.Header.Get("Docker-Content-Digest")
	if !digestPattern.MatchString(d) {
		return "", fmt.Errorf("%s tag %s: the registry gave no sha256 digest", ref, tag)
	}
	return d, nil
}

// nextPage is the page a tag list's Link header (`<url>; rel="next"`)
// names, resolved against the page it came with, on the same registry;
// nil when there is none.
func nextPage(page *url.URL, link string) (*url.URL, error) {
	target, params, ok := strings.Cut(link, ";")
	if !ok || !strings.Contains(params, `rel="next"`) {
		return nil, nil
	}
	next, err := page.Parse(strings.Trim(strings.TrimSpace(target), "<>"))
	if err != nil {
		return nil, fmt.Errorf("the next page %q: %w", target, err)
	}
	if next.Host != page.Host || next.Scheme != page.Scheme {
		return nil, fmt.Errorf("the next page is on another server (%s)", next.Host)
	}
	return next, nil
}

// anonymousToken asks the token service a registry's Bearer challenge
// names for an anonymous token with the scope it asks for.
func anonymousToken(ctx context.Context, c *http.Client, challenge string, insecure bool) (string, error) {
	scheme, params, _ := strings.Cut(challenge, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", errors.New("the registry asks for credentials; the manager reads public sources only")
	}
	p := challengeParams(params)
	realm, err := url.Parse(p["realm"])
	if err != nil || realm.Host == "" || (realm.Scheme != "https" && !(insecure && realm.Scheme == "http")) {
		return "", fmt.Errorf("the registry's token service %q is not an https:// URL", p["realm"])
	}
	q := realm.Query()
	for _, k := range []string{"service", "scope"} {
		if p[k] != "" {
			q.Set(k, p[k])
		}
	}
	realm.RawQuery = q.Encode()
	body, err := get(ctx, c, realm.String())
	if err != nil {
		return "", err
	}
	var answer struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return "", fmt.Errorf("reading the registry's token: %w", err)
	}
	if answer.Token == "" {
		answer.Token = answer.AccessToken
	}
	if answer.Token == "" {
		return "", errors.New("the registry's token service gave no token")
	}
	return answer.Token, nil
}

// challengeParams reads the key="value" pairs of a WWW-Authenticate
// challenge. Values are quoted and hold no quotes in what registries send.
func challengeParams(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		var key, value string
		var ok bool
		key, s, ok = strings.Cut(strings.TrimLeft(s, ", "), "=")
		if !ok {
			break
		}
		if strings.HasPrefix(s, `"`) {
			value, s, _ = strings.Cut(s[1:], `"`)
		} else {
			value, s, _ = strings.Cut(s, ",")
		}
		out[strings.ToLower(strings.TrimSpace(key))] = value
	}
	return out
}
