package offline_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/gomega"

	"github.com/fleeet-dev/fleeet/internal/offline"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// sourcesFleet syncs one Remote from an OCI artifact of manifests (%[1]s
// oci URL, %[2]s tag), a chart at a path of a git source (%[3]s) and a
// chart OCI artifact (%[4]s, version 1.2.3).
const sourcesFleet = `apiVersion: fleeet.dev/v1alpha1
kind: Remote
metadata: {name: edge-1}
---
apiVersion: fleeet.dev/v1alpha1
kind: Module
metadata: {name: manifests}
spec:
  selector: {}
  sync:
    source: {oci: {url: "%[1]s", tag: %[2]s}}
    package: {kustomize: {path: ./deploy, substitute: {GREETING: hello}}}
---
apiVersion: fleeet.dev/v1alpha1
kind: Module
metadata: {name: gitchart}
spec:
  selector: {}
  sync:
    source: {git: {url: "%[3]s", tag: v1.0.0}}
    package: {helm: {chart: charts/hello}}
---
apiVersion: fleeet.dev/v1alpha1
kind: Module
metadata: {name: ocichart}
spec:
  selector: {}
  sync:
    source: {oci: {url: "%[4]s", tag: 1.2.3}}
    package: {helm: {}}
`

func TestSyncsFromOCIArtifactsAndGitChartsRenderOffline(t *testing.T) {
	g := NewWithT(t)
	chartHost := chartRegistry(t, testenv.ChartDir("hello"), "robot", "t0ken")
	img, err := crane.Image(map[string][]byte{"deploy/cm.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greeting}\ndata:\n  say: ${GREETING}\n")})
	g.Expect(err).NotTo(HaveOccurred())
	ref, err := name.ParseReference(chartHost+"/manifests:v1", name.Insecure)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: "robot", Password: "t0ken"}))).To(Succeed())

	files := map[string]string{}
	for _, n := range filesUnder(t, testenv.ChartDir("hello")) {
		content, err := os.ReadFile(filepath.Join(testenv.ChartDir("hello"), n))
		g.Expect(err).NotTo(HaveOccurred())
		files["charts/hello/"+n] = string(content)
	}
	git := testenv.NewGitServer(t)
	gitURL, _ := git.Commit(t, "app", files, "v1.0.0")

	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "fleet.yaml"), []byte(fmt.Sprintf(sourcesFleet,
		"oci://"+chartHost+"/manifests", "v1", gitURL, "oci://"+chartHost+"/charts/hello")), 0o600)).To(Succeed())
	f, err := offline.Load("team-a", dir)
	g.Expect(err).NotTo(HaveOccurred())
	plans, err := f.Plans(t.Context(), 0, nil)
	g.Expect(err).NotTo(HaveOccurred())
	sources := offline.NewSources(t.TempDir(), credentialsFile(t, "oci://robot:t0ken@"+chartHost+"\n"), true)
	rendered := offline.RenderPlans(t.Context(), &offline.Renderer{Sources: sources, Namespace: "tenant-a"}, plans)
	g.Expect(rendered.Failed).To(BeEmpty())
	for k, v := range rendered.Manifests {
		t.Logf("%v:\n%s", k, v)
	}
	key := func(sync string) offline.Key { return offline.Key{Namespace: "team-a", Remote: "edge-1", Sync: sync} }
	g.Expect(rendered.Manifests[key("manifests")]).To(ContainSubstring("say: hello"))
	g.Expect(rendered.Manifests[key("gitchart")]).To(ContainSubstring("# Source: hello/templates/"))
	g.Expect(rendered.Manifests[key("ocichart")]).To(ContainSubstring("# Source: hello/templates/"))
}
