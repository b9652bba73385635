package testenv

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	. "github.com/onsi/gomega"
)

func TestPodinfoIsBuiltWithItsProbeBinaryAndServedAsSources(t *testing.T) {
	if testing.Short() {
		t.Skip("builds podinfo from its module on a cold cache")
	}
	g := NewWithT(t)
	p := GetPodinfo(t)
	g.Expect(p.Image).To(Equal("ghcr.io/stefanprodan/podinfo:6.9.2"))

	dir := t.TempDir()
	g.Expect(runIn(dir, "tar", "-xf", p.Archive)).Error().NotTo(HaveOccurred())
	idx, err := layout.ImageIndexFromPath(dir)
	g.Expect(err).NotTo(HaveOccurred())
	im, err := idx.IndexManifest()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(im.Manifests).To(HaveLen(1))
	g.Expect(im.Manifests[0].Annotations).To(HaveKeyWithValue("io.containerd.image.name", p.Image))
	img, err := idx.Image(im.Manifests[0].Digest)
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := img.ConfigFile()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Config.Entrypoint).To(Equal([]string{"/podinfo"}))

	files := p.Kustomize(t, "apps/podinfo", func(name string, content []byte) []byte {
		if name == "deployment.yaml" {
			return []byte(strings.ReplaceAll(string(content), "/readyz", "/nowhere"))
		}
		return content
	})
	g.Expect(files).To(HaveKey("apps/podinfo/kustomization.yaml"))
	g.Expect(files["apps/podinfo/deployment.yaml"]).To(And(ContainSubstring("image: "+p.Image), ContainSubstring("/nowhere")))
	url, _ := NewGitServer(t).Commit(t, "podinfo", files, "v1")
	g.Expect(runIn(t.TempDir(), "git", "ls-remote", url, "refs/tags/v1")).To(ContainSubstring("refs/tags/v1"))

	repo := NewChartRepo(t, p.ChartDir())
	resp, err := http.Get(repo.URL + "/index.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	index, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(index)).To(And(ContainSubstring("podinfo:"), ContainSubstring("version: 6.9.2")))
}
