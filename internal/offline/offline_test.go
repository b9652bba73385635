package offline

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestCredentialsGoOnlyToTheirSchemeAndHost(t *testing.T) {
	g := NewWithT(t)
	file := filepath.Join(t.TempDir(), "credentials")
	g.Expect(os.WriteFile(file, []byte("# CI's tokens\n\nhttps://ci:s3cret@git.example.com\noci://robot:t0ken@registry.example.com:5000\n"), 0o600)).To(Succeed())
	c, err := ReadCredentials(file)
	g.Expect(err).NotTo(HaveOccurred())
	for _, tc := range []struct{ url, user, password string }{
		{"https://git.example.com/team/app.git", "ci", "s3cret"},
		{"http://git.example.com/team/app.git", "", ""}, // not over plain HTTP
		{"https://evil.example.com/git.example.com", "", ""},
		{"https://git.example.com.evil.example.com/app.git", "", ""},
		{"oci://registry.example.com:5000/charts", "robot", "t0ken"},
		{"oci://registry.example.com/charts", "", ""}, // another port
	} {
		user, password := c.For(tc.url)
		g.Expect([]string{user, password}).To(Equal([]string{tc.user, tc.password}), tc.url)
	}
	none, err := ReadCredentials("")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(none.For("https://git.example.com/app.git")).To(BeEmpty())
}

func TestCredentialsFileErrorsNeverQuoteTheFile(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"https://ci:s3cret@git.example.com/%zz", "line 1: want scheme://user:password@host"},
		{"https://git.example.com", "line 1: want scheme://user:password@host"},
		{"https://ci@git.example.com", "line 1: no password after the user name"},
		{"ssh://git:s3cret@git.example.com", `line 1: scheme "ssh": want https, http or oci`},
	} {
		g := NewWithT(t)
		file := filepath.Join(t.TempDir(), "credentials")
		g.Expect(os.WriteFile(file, []byte(tc.line), 0o600)).To(Succeed())
		_, err := ReadCredentials(file)
		g.Expect(err).To(MatchError(ContainSubstring(tc.want)), tc.line)
		g.Expect(err.Error()).NotTo(ContainSubstring("s3cret"))
	}
}

func TestLoadKeepsModulesRemotesAndConfigMapsOfEveryFile(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	write := func(name, content string) {
		g.Expect(os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)).To(Succeed())
	}
	write("fleet/modules.yaml", `apiVersion: fleeet.dev/v1alpha1
kind: Module
metadata: {name: app}
spec:
  selector: {}
  sync:
    source: {git: {url: "https://git.example.com/app.git", tag: v1.0.0}}
    package: {kustomize: {path: ./deploy}}
---
apiVersion: fleeet.dev/v1alpha1
kind: Module
metadata: {name: needs}
spec:
  selector: {matchLabels: {region: eu}}
  controlPlaneBindings: [{name: X, objectFieldRef: {kind: ConfigMap, name: absent, fieldPath: /data/x}}]
  sync:
    source: {git: {url: "https://git.example.com/app.git", tag: v1.0.0}}
    package: {kustomize: {path: ./deploy}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: not-ours}
---
apiVersion: fleeet.dev/v1alpha1
kind: Remote
metadata: {name: edge-1, namespace: team-b, labels: {region: eu}}
`)
	write("fleet/remotes.json", `{"apiVersion": "fleeet.dev/v1alpha1", "kind": "Remote", "metadata": {"name": "edge-2"}}`)
	write("fleet/colours.yml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: colours}\ndata: {eu: blue}\n")
	write("fleet/exported.yaml", `apiVersion: v1
kind: List
items:
- apiVersion: fleeet.dev/v1alpha1
  kind: Remote
  metadata: {name: edge-3}
  status: {kubernetesVersion: v1.31.2}
`)
	write("README.md", "apiVersion: fleeet.dev/v1alpha1\nkind: Module\n")
	write(".git/stray.yaml", "apiVersion: fleeet.dev/v1alpha1\nkind: Remote\nmetadata: {name: stray}\n")

	f, err := Load("team-a", dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Namespaces).To(HaveLen(2))
	a := f.Namespaces["team-a"]
	g.Expect(a.Modules).To(HaveLen(2))
	g.Expect(a.Modules[0].Namespace).To(Equal("team-a"))
	g.Expect(a.Modules[0].Spec.Sync.Source.Git.Tag).To(Equal("v1.0.0"))
	g.Expect(a.Remotes).To(HaveLen(2))
	g.Expect(a.Remotes[0].Name).To(Equal("edge-3"))
	g.Expect(a.Remotes[1].Name).To(Equal("edge-2"))
	g.Expect(a.ConfigMaps).To(HaveKey("colours"))
	g.Expect(f.Namespaces["team-b"].Remotes[0].Labels).To(Equal(map[string]string{"region": "eu"}))

	plans, err := f.Plans(t.Context(), 0, nil)
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, p := range plans {
		names = append(names, fmt.Sprintf("%s/%s %q %d", p.Namespace, p.Remote, p.KubeVersion, len(p.Syncs)))
	}
	g.Expect(names).To(Equal([]string{`team-a/edge-2 "" 1`, `team-a/edge-3 "v1.31.2" 1`, `team-b/edge-1 "" 0`}))
	g.Expect(plans[0].Notes).To(BeEmpty())
	edge3 := &f.Namespaces["team-a"].Remotes[0]
	edge3.Labels = map[string]string{"region": "eu"}
	plans, err = f.Plans(t.Context(), 0, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plans[1].Notes).To(Equal([]string{`Module needs left out: spec.controlPlaneBindings[X]: reading ConfigMap absent: configmaps "absent" not found`}))
}

func TestLoadRefusesWhatItCannotReadUnambiguously(t *testing.T) {
	for _, tc := range []struct{ name, content, want string }{
		{"misspelt field", "apiVersion: fleeet.dev/v1alpha1\nkind: Module\nmetadata: {name: app}\nspec: {selectr: {}}\n",
			`document 1: Module: error unmarshaling JSON: while decoding JSON: json: unknown field "selectr"`},
		{"no name", "apiVersion: fleeet.dev/v1alpha1\nkind: Remote\nmetadata: {}\n", "document 1: Remote: metadata.name is empty"},
		{"twice", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
			"document 2: ConfigMap team-a/c is defined twice, first in "},
	} {
		g := NewWithT(t)
		file := filepath.Join(t.TempDir(), "fleet.yaml")
		g.Expect(os.WriteFile(file, []byte(tc.content), 0o644)).To(Succeed())
		_, err := Load("team-a", file)
		g.Expect(err).To(MatchError(ContainSubstring(file+": "+tc.want)), tc.name)
	}

	g := NewWithT(t)
	file := filepath.Join(t.TempDir(), "fleet.yaml")
	g.Expect(os.WriteFile(file, []byte("apiVersion: fleeet.dev/v1alpha1\nkind: Module\nmetadata: {name: app}\n"+
		"spec: {selector: {matchExpressions: [{key: env, operator: Near}]}}\n"), 0o644)).To(Succeed())
	f, err := Load("team-a", file)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.Plans(t.Context(), 0, nil)
	g.Expect(err).To(MatchError(`module team-a/app: spec.selector: "Near" is not a valid label selector operator`))
}

func TestDownstreamValuesResolveLiteralsAndKeepReadsAsMentions(t *testing.T) {
	g := NewWithT(t)
	values, unresolved := downstreamValues([]fleeetv1.Binding{
		{Name: "SITE", ObjectFieldRef: &fleeetv1.ObjectFieldRef{APIVersion: "v1", Kind: "ConfigMap", Name: "site", FieldPath: "/data/name"}},
		{Name: "HOST", Value: ptr.To("web.$(SITE).example.com")},
		{Name: "PORT", Value: ptr.To("8080")},
	})
	g.Expect(values).To(Equal(map[string]string{"SITE": "$(SITE)", "HOST": "web.$(SITE).example.com", "PORT": "8080"}))
	g.Expect(unresolved).To(Equal([]string{"binding SITE reads ConfigMap site /data/name in the cluster: shown as $(SITE)"}))
}

func TestCompareGivesOneUnifiedDiffPerChangedRendering(t *testing.T) {
	g := NewWithT(t)
	key := func(remote, sync string) Key { return Key{Namespace: "team-a", Remote: remote, Sync: sync} }
	base := &Rendered{Manifests: map[Key]string{
		key("edge-1", "app"):  "kind: Deployment\nimage: app:1\n",
		key("edge-1", "crds"): "kind: CustomResourceDefinition\n",
		key("edge-2", "app"):  "kind: Deployment\nimage: app:1\n",
	}}
	head := &Rendered{Manifests: map[Key]string{
		key("edge-1", "app"): "kind: Deployment\nimage: app:2\n",
		key("edge-1", ""):    "# Module big left out\n",
		key("edge-2", "app"): "kind: Deployment\nimage: app:1\n",
		key("edge-2", "web"): "kind: Service\n",
	}}
	diffs := Compare(base, head)
	var changes []string
	for _, d := range diffs {
		changes = append(changes, d.Remote+"/"+d.Sync+" "+d.Change)
	}
	g.Expect(changes).To(Equal([]string{"edge-1/ added", "edge-1/app changed", "edge-1/crds removed", "edge-2/web added"}))
	g.Expect(diffs[1].Unified).To(Equal("--- base/team-a/edge-1/app\n+++ head/team-a/edge-1/app\n@@ -1,2 +1,2 @@\n kind: Deployment\n-image: app:1\n+image: app:2\n"))
	g.Expect(diffs[0].Unified).To(Equal("--- /dev/null\n+++ head/team-a/edge-1/(plan)\n@@ -0,0 +1 @@\n+# Module big left out\n"))
	g.Expect(diffs[2].Unified).To(HavePrefix("--- base/team-a/edge-1/crds\n+++ /dev/null\n"))
}

func TestSourcesRefuseSchemesTheAPIRefuses(t *testing.T) {
	g := NewWithT(t)
	s := NewSources(t.TempDir(), nil, false)
	for _, url := range []string{"ext::sh -c touch% /tmp/owned", "file:///etc", "https://host/repo.git --upload-pack=touch"} {
		err := s.CheckoutTo(t.Context(), &sourcev1.GitRepository{Spec: sourcev1.GitRepositorySpec{URL: url, Reference: &sourcev1.GitRepositoryRef{Tag: "v1"}}}, t.TempDir())
		g.Expect(err).To(MatchError(ContainSubstring("want https://, http:// or ssh://")), url)
	}
	for _, url := range []string{"file:///etc/charts", "s3://bucket/charts"} {
		_, err := s.Chart(t.Context(), &sourcev1.HelmRepository{Spec: sourcev1.HelmRepositorySpec{URL: url}}, "app", "1.0.0")
		g.Expect(err).To(MatchError(ContainSubstring("want https://, http:// or oci://")), url)
	}
}
