package testenv

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// The media types of what Flux and Helm push to OCI registries, which
// source-controller reads back.
const (
	fluxConfigMediaType  types.MediaType = "application/vnd.cncf.flux.config.v1+json"
	fluxContentMediaType types.MediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"
	helmConfigMediaType  types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	helmChartMediaType   types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
	// cosignPayloadMediaType is the layer of a cosign signature image; its
	// descriptor carries the signature in cosignSignatureAnnotation.
	cosignPayloadMediaType    types.MediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	cosignSignatureAnnotation                 = "dev.cosignproject.cosign/signature"
)

// OCIRegistry is an OCI registry (go-containerregistry's, in memory) served
// over TLS with its own CA on loopback. A private one (NewPrivateRegistry)
// answers only requests with its credentials; a public one
// (NewPublicRegistry) lets anyone pull, as ghcr.io and Docker Hub do for
// public packages, and takes pushes only with its credentials.
type OCIRegistry struct {
	// Host is the registry's host:port; an artifact is at oci://Host/<repo>.
	Host string
	// Username and Password are the credentials it accepts (a private
	// registry accepts every password Rotate issued too, until Revoke).
	Username, Password string
	// CA is the PEM certificate its TLS certificate is signed with.
	CA []byte

	transport http.RoundTripper
	rotated   *passwords
}

// passwords are the further passwords a private registry accepts, and
// those it refuses, whoever issued them.
type passwords struct {
	mu           sync.Mutex
	all, revoked []string
}

// accept reports whether pass is one of all.
func (p *passwords) accept(pass string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.all, func(have string) bool { return equal(pass, have) })
}

// refuse reports whether pass was revoked.
func (p *passwords) refuse(pass string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.revoked, func(have string) bool { return equal(pass, have) })
}

// NewPrivateRegistry starts a registry with fresh credentials, stopped when
// the test ends.
func NewPrivateRegistry(t TB) *OCIRegistry {
	t.Helper()
	creds := newRegistryCredentials(t)
	rotated := &passwords{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r := startRegistry(t, creds, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		if rotated.refuse(pass) || (!creds.accept(r) && !(equal(user, creds.Username) && rotated.accept(pass))) {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	r.rotated = rotated
	return r
}

// Rotate issues a new password for a private registry and returns it; the
// registry goes on accepting the earlier ones, as a registry's old tokens
// stay valid until revoked, so a cluster not yet given the new one keeps
// pulling.
func (r *OCIRegistry) Rotate(t TB) string {
	t.Helper()
	if r.rotated == nil {
		t.Fatal("only a private registry's password rotates")
	}
	pass := randomHex(t)
	r.rotated.mu.Lock()
	defer r.rotated.mu.Unlock()
	r.rotated.all = append(r.rotated.all, pass)
	return pass
}

// Revoke makes a private registry refuse password from now on, the first
// one or one Rotate issued, as a registry refuses a revoked token.
func (r *OCIRegistry) Revoke(t TB, password string) {
	t.Helper()
	if r.rotated == nil {
		t.Fatal("only a private registry's passwords are revoked")
	}
	r.rotated.mu.Lock()
	defer r.rotated.mu.Unlock()
	r.rotated.revoked = append(r.rotated.revoked, password)
}

// NewPublicRegistry starts a registry anyone may pull from, stopped when
// the test ends. As public registries do, it answers a request without a
// token with a Bearer challenge naming its token service (/token), which
// gives anyone a token to pull with and, for its credentials, one to push
// with.
func NewPublicRegistry(t TB) *OCIRegistry {
	t.Helper()
	creds := newRegistryCredentials(t)
	pull, push := randomHex(t), randomHex(t)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	return startRegistry(t, creds, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		reading := r.Method == http.MethodGet || r.Method == http.MethodHead
		switch {
		case r.URL.Path == "/token":
			token := pull
			if creds.accept(r) {
				token = push
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"token":%q}`, token)
		case equal(bearer, push), reading && equal(bearer, pull):
			reg.ServeHTTP(w, r)
		default:
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="https://%s/token",service="registry",scope="repository:any:pull"`, r.Host))
			http.Error(w, "a token is required", http.StatusUnauthorized)
		}
	}))
}

// newRegistryCredentials makes a registry's fresh credentials.
func newRegistryCredentials(t TB) GitCredentials {
	return GitCredentials{Username: "fleeet", Password: randomHex(t)}
}

// randomHex is 16 random bytes in hex.
func randomHex(t TB) string {
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(secret)
}

// startRegistry serves handler over TLS on loopback until the test ends.
func startRegistry(t TB, creds GitCredentials, handler http.Handler) *OCIRegistry {
	srv := httptest.NewUnstartedServer(handler)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return &OCIRegistry{
		Host:      strings.TrimPrefix(srv.URL, "https://"),
		Username:  creds.Username,
		Password:  creds.Password,
		CA:        pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
		transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
}

// Transport is an HTTP transport that trusts the registry's CA.
func (r *OCIRegistry) Transport() http.RoundTripper { return r.transport }

// DockerConfigJSON is the .dockerconfigjson of a kubernetes.io/dockerconfigjson
// Secret holding the registry's credentials, or, with password set, other
// (wrong) ones.
func (r *OCIRegistry) DockerConfigJSON(t TB, password string) []byte {
	t.Helper()
	auth := base64.StdEncoding.EncodeToString([]byte(r.Username + ":" + password))
	b, err := json.Marshal(map[string]any{"auths": map[string]any{
		r.Host: map[string]string{"username": r.Username, "password": password, "auth": auth},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// PushKustomize pushes files (path → content) as a Flux artifact, the
// format `flux push artifact` writes, to repository repo at tag, and returns
// the artifact's URL (oci://Host/repo) and manifest digest.
func (r *OCIRegistry) PushKustomize(t TB, repo, tag string, files map[string]string) (url, digest string) {
	t.Helper()
	return r.push(t, repo, tag, fluxConfigMediaType, []byte("{}"), static.NewLayer(tarGz(t, files), fluxContentMediaType), nil)
}

// PushChart packages the chart in dir and pushes it as helm push does: to
// repository repo/<chart name>, tagged with its version. It returns the
// repository URL (oci://Host/repo/<name>), the version and the digest.
func (r *OCIRegistry) PushChart(t TB, repo, dir string) (url, version, digest string) {
	t.Helper()
	ch, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	config, err := json.Marshal(ch.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	url, digest = r.push(t, repo+"/"+ch.Name(), ch.Metadata.Version, helmConfigMediaType, config,
		static.NewLayer(content, helmChartMediaType), nil)
	return url, ch.Metadata.Version, digest
}

// push writes a one-layer OCI artifact with the given config blob, the
// layer's descriptor carrying annotations, and returns its repository's URL
// and its manifest's digest.
func (r *OCIRegistry) push(t TB, repo, tag string, configType types.MediaType, config []byte, layer v1.Layer, annotations map[string]string) (url, digest string) {
	t.Helper()
	ref, err := name.ParseReference(r.Host + "/" + repo + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	auth := authn.FromConfig(authn.AuthConfig{Username: r.Username, Password: r.Password})
	opts := []remote.Option{remote.WithAuth(auth), remote.WithTransport(r.transport), remote.WithContext(t.Context())}
	manifest := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for i, l := range []v1.Layer{static.NewLayer(config, configType), layer} {
		if err := remote.WriteLayer(ref.Context(), l, opts...); err != nil {
			t.Fatalf("pushing to %s: %v", ref, err)
		}
		d, err := partial.Descriptor(l)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			manifest.Config = *d
		} else {
			d.Annotations = annotations
			manifest.Layers = append(manifest.Layers, *d)
		}
	}
	raw, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(ref, rawManifest(raw), opts...); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return "oci://" + r.Host + "/" + repo, d.String()
}

// rawManifest is an OCI image manifest as remote.Put writes it.
type rawManifest []byte

// RawManifest is the manifest's bytes, as remote.Put writes them.
func (m rawManifest) RawManifest() ([]byte, error) { return m, nil }

// MediaType is what remote.Put sends as the manifest's Content-Type.
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// SignCosign signs the artifact at digest in repository repo as `cosign
// sign --key` does without a transparency log: a simple-signing payload
// naming the digest, signed with a fresh ECDSA P-256 key, pushed as the
// image tagged sha256-<hex>.sig. It returns the PEM public key, which
// Flux's cosign verification takes from a Secret key ending in .pub.
func (r *OCIRegistry) SignCosign(t TB, repo, digest string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": r.Host + "/" + repo},
			"image":    map[string]string{"docker-manifest-digest": digest},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	r.push(t, repo, strings.Replace(digest, ":", "-", 1)+".sig", "application/vnd.oci.image.config.v1+json", []byte("{}"),
		static.NewLayer(payload, cosignPayloadMediaType),
		map[string]string{cosignSignatureAnnotation: base64.StdEncoding.EncodeToString(sig)})
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
}

// tarGz packs files as a gzipped tarball, in name order with fixed times so
// the same files make the same artifact.
func tarGz(t TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		hdr := &tar.Header{Name: filepath.ToSlash(name), Mode: 0o644, Size: int64(len(files[name])), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
