package ociimage

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	. "github.com/onsi/gomega"
)

var created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func spec(ca []byte) Spec {
	return Spec{
		Name:        "app",
		Binary:      []byte("not really an executable"),
		CABundle:    ca,
		Created:     created,
		Annotations: map[string]string{"org.opencontainers.image.title": "app"},
	}
}

// files reads the image's single layer back as name → header and contents.
func files(g Gomega, img v1.Image) (map[string]*tar.Header, map[string]string) {
	layers, err := img.Layers()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(layers).To(HaveLen(1))
	rc, err := layers[0].Uncompressed()
	g.Expect(err).NotTo(HaveOccurred())
	defer rc.Close()
	hdrs, bodies := map[string]*tar.Header{}, map[string]string{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs, bodies
		}
		g.Expect(err).NotTo(HaveOccurred())
		body, err := io.ReadAll(tr)
		g.Expect(err).NotTo(HaveOccurred())
		hdrs[hdr.Name], bodies[hdr.Name] = hdr, string(body)
	}
}

func TestImageHoldsTheBinaryPasswdAndCABundleOnly(t *testing.T) {
	g := NewWithT(t)
	img, err := Build(spec([]byte("ca")))
	g.Expect(err).NotTo(HaveOccurred())
	hdrs, bodies := files(g, img)
	g.Expect(hdrs).To(HaveLen(7))
	g.Expect(hdrs).To(HaveKey("etc/"))
	g.Expect(hdrs).To(HaveKey("etc/ssl/"))
	g.Expect(hdrs).To(HaveKey("etc/ssl/certs/"))
	g.Expect(bodies).To(HaveKeyWithValue("etc/ssl/certs/ca-certificates.crt", "ca"))
	g.Expect(bodies).To(HaveKeyWithValue("app", "not really an executable"))
	g.Expect(hdrs["app"].Mode).To(Equal(int64(0o755)))
	g.Expect(bodies["etc/passwd"]).To(ContainSubstring("nonroot:x:65532:65532:"))
	g.Expect(bodies["etc/group"]).To(ContainSubstring("nonroot:x:65532:"))
	for name, hdr := range hdrs {
		g.Expect(hdr.ModTime.Equal(created)).To(BeTrue(), "mtime of %s", name)
		g.Expect(hdr.Uid).To(BeZero(), "owner of %s", name)
	}

	cfg, err := img.ConfigFile()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Config.User).To(Equal("65532:65532"))
	g.Expect(cfg.Config.Entrypoint).To(Equal([]string{"/app"}))
	g.Expect(cfg.Config.Labels).To(HaveKeyWithValue("org.opencontainers.image.title", "app"))
	g.Expect(cfg.Created.Time.Equal(created)).To(BeTrue())
	m, err := img.Manifest()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Annotations).To(HaveKeyWithValue("org.opencontainers.image.title", "app"))
}

func TestImageWithoutCABundleHasNoSSLDirectory(t *testing.T) {
	g := NewWithT(t)
	img, err := Build(spec(nil))
	g.Expect(err).NotTo(HaveOccurred())
	hdrs, _ := files(g, img)
	g.Expect(hdrs).To(HaveLen(4))
	g.Expect(hdrs).NotTo(HaveKey("etc/ssl/"))
}

func TestImageHoldsExtraFilesInTheirDirectories(t *testing.T) {
	g := NewWithT(t)
	s := spec(nil)
	s.Files = []File{{Path: "/usr/local/bin/tool", Mode: 0o755, Body: []byte("tool")}}
	img, err := Build(s)
	g.Expect(err).NotTo(HaveOccurred())
	hdrs, bodies := files(g, img)
	g.Expect(bodies).To(HaveKeyWithValue("usr/local/bin/tool", "tool"))
	g.Expect(hdrs["usr/local/bin/tool"].Mode).To(Equal(int64(0o755)))
	for _, dir := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		g.Expect(hdrs).To(HaveKey(dir))
		g.Expect(hdrs[dir].Typeflag).To(Equal(byte(tar.TypeDir)))
	}
}

func TestSameInputsGiveTheSameDigestAndArchive(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	var digests []v1.Hash
	var archives [][]byte
	for i := range 2 {
		img, err := Build(spec([]byte("ca")))
		g.Expect(err).NotTo(HaveOccurred())
		d, err := img.Digest()
		g.Expect(err).NotTo(HaveOccurred())
		path := filepath.Join(dir, string(rune('a'+i))+".tar")
		g.Expect(WriteArchive(img, "example.test/x/app:v1", path, created)).To(Succeed())
		data, err := os.ReadFile(path)
		g.Expect(err).NotTo(HaveOccurred())
		digests, archives = append(digests, d), append(archives, data)
	}
	g.Expect(digests[1]).To(Equal(digests[0]))
	g.Expect(archives[1]).To(Equal(archives[0]))
}

func TestArchiveNamesTheImageForContainerd(t *testing.T) {
	g := NewWithT(t)
	img, err := Build(spec(nil))
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(t.TempDir(), "app.tar")
	g.Expect(WriteArchive(img, "localhost:5000/x/app:v1", path, created)).To(Succeed())

	dir := t.TempDir()
	f, err := os.Open(path)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(hdr.ModTime.Equal(created)).To(BeTrue(), "mtime of %s", hdr.Name)
		target := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			g.Expect(os.MkdirAll(target, 0o755)).To(Succeed())
			continue
		}
		body, err := io.ReadAll(tr)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(target, body, 0o644)).To(Succeed())
	}
	idx, err := layout.ImageIndexFromPath(dir)
	g.Expect(err).NotTo(HaveOccurred())
	im, err := idx.IndexManifest()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(im.Manifests).To(HaveLen(1))
	g.Expect(im.Manifests[0].Annotations).To(Equal(map[string]string{
		"org.opencontainers.image.ref.name": "v1",
		ContainerdImageName:                 "localhost:5000/x/app:v1",
	}))
}

func TestArchiveRefusesAReferenceWithoutTag(t *testing.T) {
	g := NewWithT(t)
	img, err := Build(spec(nil))
	g.Expect(err).NotTo(HaveOccurred())
	err = WriteArchive(img, "localhost:5000/x/app", filepath.Join(t.TempDir(), "app.tar"), created)
	g.Expect(err).To(MatchError(ContainSubstring(`"localhost:5000/x/app" has no tag`)))
}
