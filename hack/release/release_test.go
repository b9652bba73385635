package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// ciValues is the values file of each chart's ci/ a user's install stands
// in for here: the release is judged by what the chart renders with them.
var ciValues = map[string]string{
	"fleet-manager": "default-values.yaml",
	"fleet-agent":   "single-tenant-values.yaml",
}

// TestReleaseInstallsFromOCIThePushedImagesByDigest releases into a registry
// of the test's own, then installs as a user would, from oci:// at that
// version: each chart's Deployment runs its image by exactly the digest the
// registry serves for the image's tag. A second release of the same commit
// pushes the same image digests.
func TestReleaseInstallsFromOCIThePushedImagesByDigest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries twice")
	}
	g := NewWithT(t)
	ctx := context.Background()
	// Credentials would come from these; the test's registry needs none.
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("HELM_CONFIG_HOME", t.TempDir())
	t.Setenv("HELM_CACHE_HOME", t.TempDir())
	reg := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	registryPath := strings.TrimPrefix(reg.URL, "http://") + "/fleeet"
	const version = "1.2.3-rc.1"

	var out bytes.Buffer
	opts := options{registry: registryPath, version: version, out: t.TempDir(), plainHTTP: true}
	g.Expect(publish(ctx, opts, &out)).To(Succeed())
	first := servedImageDigests(t, registryPath, version)

	client, err := registryClient(true)
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range []string{"fleet-manager", "fleet-agent"} {
		chartRef := "oci://" + registryPath + "/charts/" + n
		imageRef := registryPath + "/" + n + ":" + version
		g.Expect(out.String()).To(ContainSubstring("image  %s@%s\n", imageRef, first[n]))
		g.Expect(out.String()).To(ContainSubstring("helm install %s %s --version %s --plain-http", n, chartRef, version))

		install := action.NewInstall(&action.Configuration{})
		install.SetRegistryClient(client)
		install.Version, install.PlainHTTP = version, true
		install.ReleaseName, install.Namespace = n, "fleeet-system"
		install.DryRun, install.ClientOnly = true, true
		path, err := install.LocateChart(chartRef, cli.New())
		g.Expect(err).NotTo(HaveOccurred(), "pulling %s at %s", chartRef, version)
		ch, err := loader.Load(path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Metadata.Version).To(Equal(version))
		g.Expect(ch.Metadata.AppVersion).To(Equal(version))
		g.Expect(valuesFile(ch)).To(ContainSubstring("# -- Image digest"), "the packaged values.yaml keeps its comments")

		chartDigest := servedDigest(t, registryPath+"/charts/"+n+":"+version)
		g.Expect(out.String()).To(ContainSubstring("chart  %s:%s@%s\n", chartRef, version, chartDigest))

		vals, err := chartutil.ReadValuesFile(filepath.Join("..", "..", "charts", n, "ci", ciValues[n]))
		g.Expect(err).NotTo(HaveOccurred())
		rel, err := install.Run(ch, vals)
		g.Expect(err).NotTo(HaveOccurred(), "rendering %s", n)
		g.Expect(deploymentImage(t, rel.Manifest, n)).To(Equal(imageRef+"@"+first[n]), "the image %s runs", n)
		if n == "fleet-manager" {
			agentChart := fmt.Sprintf("oci://%s/charts/fleet-agent --version %s --plain-http", registryPath, version)
			g.Expect(rel.Manifest).To(ContainSubstring("--agent-chart=%s", agentChart), "the manager's tokens name the agent chart released with it")
		}
	}

	g.Expect(publish(ctx, opts, io.Discard)).To(Succeed())
	g.Expect(servedImageDigests(t, registryPath, version)).To(Equal(first), "image digests of a second release of the same commit")
}

// TestReleaseRefusesAMissingRegistryOrABadVersion checks the arguments are
// refused, saying what to write instead, before anything is built.
func TestReleaseRefusesAMissingRegistryOrABadVersion(t *testing.T) {
	for _, tc := range []struct {
		name, registry, version, want string
	}{
		{"no registry", "", "1.2.3", "no registry: name one, e.g. make release REGISTRY=registry.example.com/fleeet VERSION=1.2.3"},
		{"a registry URL", "https://registry.example.com/fleeet", "1.2.3", `registry "https://registry.example.com/fleeet": name it without a scheme`},
		{"an invalid registry", "registry.example.com/Fleeet", "1.2.3", `registry "registry.example.com/Fleeet": `},
		{"no version", "registry.example.com/fleeet", "", "no version: give one, e.g. make release"},
		{"a leading v", "registry.example.com/fleeet", "v1.2.3", `version "v1.2.3": write it without the leading v, as 1.2.3`},
		{"two numbers", "registry.example.com/fleeet", "1.2", `version "1.2" is not a SemVer version such as 1.2.3 or 1.2.3-rc.1`},
		{"build metadata", "registry.example.com/fleeet", "1.2.3+abc", `version "1.2.3+abc" is not a SemVer version`},
		{"a leading zero", "registry.example.com/fleeet", "01.2.3", `version "01.2.3" is not a SemVer version`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := publish(context.Background(), options{registry: tc.registry, version: tc.version}, io.Discard)
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

// servedImageDigests are the digests the registry serves for each image's
// tag.
func servedImageDigests(t *testing.T, registryPath, version string) map[string]string {
	return map[string]string{
		"fleet-manager": servedDigest(t, registryPath+"/fleet-manager:"+version),
		"fleet-agent":   servedDigest(t, registryPath+"/fleet-agent:"+version),
	}
}

// servedDigest is the manifest digest the registry serves for ref.
func servedDigest(t *testing.T, ref string) string {
	t.Helper()
	g := NewWithT(t)
	r, err := name.ParseReference(ref, name.Insecure)
	g.Expect(err).NotTo(HaveOccurred())
	desc, err := remote.Head(r)
	g.Expect(err).NotTo(HaveOccurred(), "HEAD %s", ref)
	return desc.Digest.String()
}

// valuesFile is the chart's values.yaml as packaged.
func valuesFile(ch *chart.Chart) string {
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			return string(f.Data)
		}
	}
	return ""
}

// deploymentImage is the first container's image of the Deployment named
// name in a rendered manifest.
func deploymentImage(t *testing.T, manifest, name string) string {
	t.Helper()
	g := NewWithT(t)
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var d appsv1.Deployment
		g.Expect(yaml.Unmarshal([]byte(doc), &d)).To(Succeed())
		if d.Kind == "Deployment" && d.Name == name {
			return d.Spec.Template.Spec.Containers[0].Image
		}
	}
	t.Fatalf("no Deployment %s in the rendered chart:\n%s", name, manifest)
	return ""
}
