package offline_test

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/offline"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// fleetFiles is a fleet as a checkout holds it: two Remotes, the ConfigMap
// a control-plane binding reads, a kustomize Module from git and a helm
// Module from an https chart repository, with %s for the git reference
// (tag: … or revision: …), the helm Module's selector and any further
// documents.
const fleetFiles = `apiVersion: fleeet.dev/v1alpha1
kind: Remote
metadata: {name: edge-1, labels: {region: eu}}
---
apiVersion: fleeet.dev/v1alpha1
kind: Remote
metadata: {name: edge-2, labels: {region: us}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: defaults}
data: {team: payments}
---
apiVersion: fleeet.dev/v1alpha1
kind: Module
metadata: {name: web}
spec:
  selector: {}
  controlPlaneBindings:
  - {name: REGION, objectFieldRef: {kind: Remote, fieldPath: /metadata/labels/region}}
  - {name: TEAM, objectFieldRef: {kind: ConfigMap, name: defaults, fieldPath: /data/team}}
  sync:
    source: {git: {url: "%[1]s", %[2]s}}
    package: {kustomize: {path: ./deploy, targetNamespace: web, substitute: {COLOUR: "$(REGION)-$(TEAM)"}}}
---
apiVersion: fleeet.dev/v1alpha1
kind: Module
metadata: {name: chart}
spec:
  selector: %[4]s
  controlPlaneBindings:
  - {name: REGION, objectFieldRef: {kind: Remote, fieldPath: /metadata/labels/region}}
  sync:
    source: {helm: {url: "%[3]s", chart: podinfo, version: 6.9.2}}
    package: {helm: {values: {ui: {message: "hello $(REGION) from $(SITE)"}}}}
    bindings:
    - {name: SITE, objectFieldRef: {apiVersion: v1, kind: ConfigMap, name: site, fieldPath: /data/name}}
%[5]s`

// ociModule is a helm Module from an oci registry, for %[5]s.
const ociModule = `---
apiVersion: fleeet.dev/v1alpha1
kind: Module
metadata: {name: oci}
spec:
  selector: {matchLabels: {region: us}}
  sync:
    source: {helm: {url: "oci://%s/charts", chart: podinfo, version: 6.9.2}}
    package: {helm: {releaseName: from-oci, targetNamespace: apps}}
`

func TestOfflineRenderingComparesWhatEachClusterAppliesFromRealSources(t *testing.T) {
	g := NewWithT(t)
	podinfo := testenv.GetPodinfo(t)
	git := testenv.NewGitServer(t)
	colour := func(pull string) func(string, []byte) []byte {
		return func(name string, content []byte) []byte {
			if name == "deployment.yaml" {
				content = bytes.Replace(content, []byte(`value: "#34577c"`), []byte(`value: "${COLOUR}"`), 1)
				content = bytes.Replace(content, []byte("imagePullPolicy: IfNotPresent"), []byte("imagePullPolicy: "+pull), 1)
			}
			return content
		}
	}
	repo, _ := git.Commit(t, "podinfo", podinfo.Kustomize(t, "deploy", colour("IfNotPresent")), "v1.0.0")
	_, commit := git.Commit(t, "podinfo", podinfo.Kustomize(t, "deploy", colour("Always")), "")
	charts := testenv.NewChartRepo(t, podinfo.ChartDir())
	oci := chartRegistry(t, podinfo.ChartDir(), "robot", "t0ken")

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		g.Expect(os.MkdirAll(filepath.Dir(p), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(p, []byte(content), 0o600)).To(Succeed())
		return p
	}
	write("base/fleet.yaml", fmt.Sprintf(fleetFiles, repo, "tag: v1.0.0", charts.URL, "{matchLabels: {region: eu}}", ""))
	write("head/fleet.yaml", fmt.Sprintf(fleetFiles, repo, "revision: "+commit, charts.URL, "{}", fmt.Sprintf(ociModule, oci)))
	creds := credentialsFile(t, "oci://robot:t0ken@"+oci+"\n")

	sources := offline.NewSources(t.TempDir(), creds, true)
	plansOf := func(checkout string) []offline.Plan {
		f, err := offline.Load("team-a", filepath.Join(dir, checkout))
		g.Expect(err).NotTo(HaveOccurred())
		plans, err := f.Plans(t.Context(), 0, nil)
		g.Expect(err).NotTo(HaveOccurred())
		return plans
	}
	render := func(plans []offline.Plan) *offline.Rendered {
		rendered := offline.RenderPlans(t.Context(), &offline.Renderer{Sources: sources, Namespace: "tenant-a"}, plans)
		g.Expect(rendered.Failed).To(BeEmpty())
		return rendered
	}
	plans := plansOf("head")
	base, head := render(plansOf("base")), render(plans)

	key := func(remote, sync string) offline.Key {
		return offline.Key{Namespace: "team-a", Remote: remote, Sync: sync}
	}
	// The control-plane bindings are each Remote's, substituted by Flux's
	// post-build substitution into the kustomize build.
	g.Expect(base.Manifests[key("edge-1", "web")]).To(ContainSubstring("\n          value: eu-payments\n"))
	g.Expect(base.Manifests[key("edge-2", "web")]).To(ContainSubstring("\n          value: us-payments\n"))
	g.Expect(base.Manifests[key("edge-1", "web")]).To(ContainSubstring("kind: Deployment\nmetadata:\n  name: podinfo\n  namespace: web\n"))
	// The helm release is templated with the Remote's values; the downstream
	// binding is named and left as written.
	chart := base.Manifests[key("edge-1", "chart")]
	g.Expect(chart).To(HavePrefix("# unresolved: binding SITE reads ConfigMap site /data/name in the cluster: shown as $(SITE)\n"))
	g.Expect(chart).To(ContainSubstring("\n  name: chart-podinfo\n  namespace: tenant-a\n"))
	g.Expect(chart).To(MatchRegexp(`- name: PODINFO_UI_MESSAGE\n\s+value: "hello eu from \$\(SITE\)"\n`))
	g.Expect(chart).NotTo(ContainSubstring("helm.sh/hook: test"), "Flux runs no chart tests unless told")
	g.Expect(base.Manifests).NotTo(HaveKey(key("edge-2", "chart")))
	g.Expect(head.Manifests[key("edge-2", "oci")]).To(ContainSubstring("\n  name: from-oci-podinfo\n  namespace: apps\n"))

	// A path out of the repository stays in it.
	escape := &fleeetv1.NamedSync{Name: "escape", SyncSpec: fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: repo, Tag: "v1.0.0"}},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "../../../../../../etc"}},
	}}
	_, err := (&offline.Renderer{Sources: sources}).Render(t.Context(), escape, "")
	g.Expect(err).To(MatchError(`sync escape: package.kustomize.path "../../../../../../etc": not in the source`))

	// A failing build names its files relative to the source, so that it
	// reads the same in both checkouts.
	broken, _ := git.Commit(t, "broken", map[string]string{"deploy/cm.yaml": "kind: ConfigMap\nmetadata: {name: [\n"}, "v1.0.0")
	escape.Source.Git.URL, escape.Package.Kustomize.Path = broken, "deploy"
	_, err = (&offline.Renderer{Sources: sources}).Render(t.Context(), escape, "")
	g.Expect(err).To(MatchError(HavePrefix("sync escape: generating kustomization.yaml: failed to decode Kubernetes YAML from ./deploy/cm.yaml: ")))

	// A chart is templated for its cluster's version, when known.
	chartSync := &plans[0].Syncs[0]
	g.Expect(chartSync.Name).To(Equal("chart"))
	_, err = (&offline.Renderer{Sources: sources}).Render(t.Context(), chartSync, "v1.22.0")
	g.Expect(err).To(MatchError(ContainSubstring("incompatible with Kubernetes v1.22.0")))

	// Without the credentials the registry refuses the chart, and the
	// failure names the sync, never the password.
	anonymous := offline.NewSources(t.TempDir(), nil, true)
	failed := offline.RenderPlans(t.Context(), &offline.Renderer{Sources: anonymous, Namespace: "tenant-a"}, plans).Failed
	g.Expect(failed).To(ConsistOf(And(HavePrefix("team-a/edge-2/oci: sync oci: chart podinfo 6.9.2 from oci://"+oci+"/charts: "), ContainSubstring("basic credential not found"))))

	var changes []string
	for _, d := range offline.Compare(base, head) {
		changes = append(changes, d.Remote+"/"+d.Sync+" "+d.Change)
		switch d.Sync {
		case "web":
			g.Expect(d.Unified).To(ContainSubstring("\n-        imagePullPolicy: IfNotPresent\n+        imagePullPolicy: Always\n"))
			g.Expect(strings.Count(d.Unified, "\n-")).To(Equal(1), "only the pull policy changes:\n"+d.Unified)
		case "chart":
			g.Expect(d.Unified).To(MatchRegexp(`\n\+\s+value: "hello us from \$\(SITE\)"\n`))
		}
	}
	g.Expect(changes).To(Equal([]string{"edge-1/web changed", "edge-2/chart added", "edge-2/oci added", "edge-2/web changed"}))
}

// chartRegistry serves an in-memory OCI registry on loopback that asks for
// user and password, pushes the chart in chartDir to it as charts/NAME and
// returns its host:port.
func chartRegistry(t *testing.T, chartDir, user, password string) string {
	t.Helper()
	g := NewWithT(t)
	reg := ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0)))
	host := strings.TrimPrefix(behindBasicAuth(t, user, password, reg), "http://")

	ch, err := loader.Load(chartDir)
	g.Expect(err).NotTo(HaveOccurred())
	archive, err := chartutil.Save(ch, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(archive)
	g.Expect(err).NotTo(HaveOccurred())
	client, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptBasicAuth(user, password))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = client.Push(data, fmt.Sprintf("%s/charts/%s:%s", host, ch.Name(), ch.Metadata.Version))
	g.Expect(err).NotTo(HaveOccurred())
	return host
}

func TestGitCredentialsReachOnlyTheirHost(t *testing.T) {
	g := NewWithT(t)
	git := testenv.NewGitServer(t)
	upstream, _ := git.Commit(t, "private", map[string]string{"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: private}\n"}, "v1.0.0")
	// The git server behind a proxy that wants a user and password, as a
	// private git host does.
	private := behindBasicAuth(t, "ci", "s3cret", proxyTo(t, git.URL))
	repo := &sourcev1.GitRepository{Spec: sourcev1.GitRepositorySpec{
		URL:       strings.Replace(upstream, git.URL, private, 1),
		Reference: &sourcev1.GitRepositoryRef{Tag: "v1.0.0"},
	}}
	checkout := func(c *offline.Credentials) error {
		return offline.NewSources(t.TempDir(), c, false).CheckoutTo(t.Context(), repo, t.TempDir())
	}

	g.Expect(checkout(credentialsFile(t, strings.Replace(private, "http://", "http://ci:s3cret@", 1)))).To(Succeed())
	for name, c := range map[string]*offline.Credentials{
		"none":         nil,
		"another host": credentialsFile(t, "http://ci:s3cret@git.example.com\n"),
		"wrong":        credentialsFile(t, strings.Replace(private, "http://", "http://ci:guess@", 1)),
	} {
		err := checkout(c)
		g.Expect(err).To(MatchError(ContainSubstring("fetching "+repo.Spec.URL+" at refs/tags/v1.0.0: git fetch: exit status 128")), name)
		g.Expect(err.Error()).NotTo(ContainSubstring("s3cret"), name)
	}
}

func TestChartRepositoryCredentialsReachOnlyTheirHost(t *testing.T) {
	g := NewWithT(t)
	charts := testenv.NewChartRepo(t, testenv.ChartDir("hello"))
	private := behindBasicAuth(t, "ci", "s3cret", proxyTo(t, charts.URL))
	repo := &sourcev1.HelmRepository{Spec: sourcev1.HelmRepositorySpec{URL: private}}
	creds := credentialsFile(t, strings.Replace(private, "http://", "http://ci:s3cret@", 1)+"\nhttp://ci:guess@charts.example.com\n")

	ch, err := offline.NewSources(t.TempDir(), creds, false).Chart(t.Context(), repo, "hello", "1.2.3")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ch.Metadata.Version).To(Equal("1.2.3"))
	_, err = offline.NewSources(t.TempDir(), nil, false).Chart(t.Context(), repo, "hello", "1.2.3")
	g.Expect(err).To(MatchError(ContainSubstring("chart hello 1.2.3 from " + private + ": ")))
	g.Expect(err).To(MatchError(ContainSubstring("401 Unauthorized")))
}

// behindBasicAuth serves next on loopback to requests with user and
// password only, as a private host does, and returns its URL.
func behindBasicAuth(t *testing.T, user, password string, next http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="private"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// proxyTo forwards requests to a server of the test.
func proxyTo(t *testing.T, upstream string) http.Handler {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	return httputil.NewSingleHostReverseProxy(target)
}

func TestCheckoutLeavesOutWhatSourceControllerIgnores(t *testing.T) {
	g := NewWithT(t)
	git := testenv.NewGitServer(t)
	files := map[string]string{
		"deploy/app.yaml": "kind: ConfigMap\n", "deploy/logo.png": "png", ".github/workflows/ci.yml": "on: push\n",
		".gitignore": "*.tmp\n",
	}
	url, _ := git.Commit(t, "app", files, "v1.0.0")
	files = map[string]string{"deploy/.sourceignore": "draft.yaml\n", "deploy/draft.yaml": "kind: Secret\n"}
	git.Commit(t, "app", files, "v1.1.0")
	checkout := func(tag string) []string {
		dir := t.TempDir()
		repo := &sourcev1.GitRepository{Spec: sourcev1.GitRepositorySpec{URL: url, Reference: &sourcev1.GitRepositoryRef{Tag: tag}}}
		g.Expect(offline.NewSources(t.TempDir(), nil, false).CheckoutTo(t.Context(), repo, dir)).To(Succeed())
		return filesUnder(t, dir)
	}
	// Without .sourceignore, Flux's defaults leave out CI files and images.
	g.Expect(checkout("v1.0.0")).To(ConsistOf("deploy/app.yaml"))
	// With one, its patterns replace the defaults.
	g.Expect(checkout("v1.1.0")).To(ConsistOf("deploy/app.yaml", "deploy/logo.png", "deploy/.sourceignore", ".github/workflows/ci.yml"))
}

func TestOCIArtifactIsExtractedAsSourceControllerDoes(t *testing.T) {
	g := NewWithT(t)
	reg := ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0)))
	host := strings.TrimPrefix(behindBasicAuth(t, "robot", "t0ken", reg), "http://")
	img, err := crane.Image(map[string][]byte{"deploy/app.yaml": []byte("kind: ConfigMap\n"), ".github/ci.yml": []byte("on: push\n")})
	g.Expect(err).NotTo(HaveOccurred())
	ref, err := name.ParseReference(host+"/manifests:v1.0.0", name.Insecure)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: "robot", Password: "t0ken"}))).To(Succeed())
	digest, err := img.Digest()
	g.Expect(err).NotTo(HaveOccurred())
	creds := credentialsFile(t, "oci://robot:t0ken@"+host+"\n")

	fetch := func(c *offline.Credentials, r *sourcev1.OCIRepositoryRef) ([]string, error) {
		dir := t.TempDir()
		repo := &sourcev1.OCIRepository{Spec: sourcev1.OCIRepositorySpec{URL: "oci://" + host + "/manifests", Reference: r}}
		err := offline.NewSources(t.TempDir(), c, true).FetchTo(t.Context(), repo, dir)
		return filesUnder(t, dir), err
	}
	for _, r := range []*sourcev1.OCIRepositoryRef{{Tag: "v1.0.0"}, {Digest: digest.String()}} {
		files, err := fetch(creds, r)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(files).To(ConsistOf("deploy/app.yaml"), "Flux's default ignore patterns leave out CI files")
	}
	_, err = fetch(nil, &sourcev1.OCIRepositoryRef{Tag: "v1.0.0"})
	g.Expect(err).To(MatchError(ContainSubstring("artifact oci://" + host + "/manifests: ")))
	g.Expect(err.Error()).NotTo(ContainSubstring("t0ken"))
	_, err = fetch(creds, nil)
	g.Expect(err).To(MatchError(ContainSubstring("no tag or digest: a moving reference is not rendered")))
}

// filesUnder lists the files under dir, relative to it.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, strings.TrimPrefix(path, dir+"/"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// credentialsFile writes lines to a credentials file and reads it; the
// test fails if the file is changed by the time it ends.
func credentialsFile(t *testing.T, lines string) *offline.Credentials {
	t.Helper()
	file := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if kept, err := os.ReadFile(file); err != nil || string(kept) != lines {
			t.Errorf("the credentials file was changed or removed: %v", err)
		}
	})
	c, err := offline.ReadCredentials(file)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestChartsAreReadFromAGitPathAndFromAnOCIArtifact(t *testing.T) {
	g := NewWithT(t)
	files := map[string]string{}
	for _, name := range filesUnder(t, testenv.ChartDir("hello")) {
		content, err := os.ReadFile(filepath.Join(testenv.ChartDir("hello"), name))
		g.Expect(err).NotTo(HaveOccurred())
		files["charts/hello/"+name] = string(content)
	}
	git := testenv.NewGitServer(t)
	url, _ := git.Commit(t, "app", files, "v1.0.0")
	host := chartRegistry(t, testenv.ChartDir("hello"), "robot", "t0ken")
	sources := offline.NewSources(t.TempDir(), credentialsFile(t, "oci://robot:t0ken@"+host+"\n"), true)

	repo := &sourcev1.GitRepository{Spec: sourcev1.GitRepositorySpec{URL: url, Reference: &sourcev1.GitRepositoryRef{Tag: "v1.0.0"}}}
	ch, err := sources.Chart(t.Context(), repo, "charts/hello", "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ch.Metadata.Name + " " + ch.Metadata.Version).To(Equal("hello 1.2.3"))
	_, err = sources.Chart(t.Context(), repo, "../../charts/nowhere", "")
	g.Expect(err).To(MatchError(HavePrefix("chart ../../charts/nowhere of " + url + ": stat ./charts/nowhere: no such file or directory")))

	artifact := &sourcev1.OCIRepository{Spec: sourcev1.OCIRepositorySpec{
		URL:           "oci://" + host + "/charts/hello",
		Reference:     &sourcev1.OCIRepositoryRef{Tag: "1.2.3"},
		LayerSelector: &sourcev1.OCILayerSelector{MediaType: registry.ChartLayerMediaType, Operation: sourcev1.OCILayerCopy},
	}}
	ch, err = sources.Chart(t.Context(), artifact, "", "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ch.Metadata.Name + " " + ch.Metadata.Version).To(Equal("hello 1.2.3"))
}
