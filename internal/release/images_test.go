package release

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/gomega"

	"github.com/fleeet-dev/fleeet/internal/ociimage"
)

// TestImagesAreReproducibleMinimalAndAnnotated runs the whole build twice,
// Go builds included: the Go build is part of what has to be reproducible,
// and the second run shares only the Go build cache with the first, as two
// `make images` runs on one machine do.
func TestImagesAreReproducibleMinimalAndAnnotated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries twice")
	}
	g := NewWithT(t)
	ctx := context.Background()
	opts, err := DefaultOptions(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	opts.Version, opts.Repository = "v0.0.0-test", "example.test/fleeet"

	opts.Out = t.TempDir()
	first, err := BuildImages(ctx, opts)
	g.Expect(err).NotTo(HaveOccurred())
	opts.Out = t.TempDir()
	second, err := BuildImages(ctx, opts)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(first).To(HaveLen(2))
	for i := range first {
		g.Expect(second[i].Digest).To(Equal(first[i].Digest), "digest of %s", first[i].Name)
	}

	// Read the archive back as any OCI tool would: unpack it, open the layout.
	r := second[0]
	g.Expect(r.Name).To(Equal("fleet-manager"))
	g.Expect(r.Ref).To(Equal("example.test/fleeet/fleet-manager:v0.0.0-test"))
	dir := t.TempDir()
	untar(t, r.Archive, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	g.Expect(err).NotTo(HaveOccurred())
	im, err := idx.IndexManifest()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(im.Manifests).To(HaveLen(1))
	desc := im.Manifests[0]
	g.Expect(desc.Digest).To(Equal(r.Digest))
	g.Expect(desc.Annotations).To(HaveKeyWithValue("org.opencontainers.image.ref.name", "v0.0.0-test"))
	g.Expect(desc.Annotations).To(HaveKeyWithValue(ociimage.ContainerdImageName, r.Ref))

	img, err := idx.Image(desc.Digest)
	g.Expect(err).NotTo(HaveOccurred())
	m, err := img.Manifest()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Annotations).To(And(
		HaveKeyWithValue("org.opencontainers.image.title", "fleet-manager"),
		HaveKeyWithValue("org.opencontainers.image.version", "v0.0.0-test"),
		HaveKeyWithValue("org.opencontainers.image.revision", opts.Revision),
		HaveKeyWithValue("org.opencontainers.image.source", SourceURL),
		HaveKeyWithValue("org.opencontainers.image.created", opts.Created.Format(time.RFC3339)),
	))
	cfg, err := img.ConfigFile()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.OS).To(Equal("linux"))
	g.Expect(cfg.Architecture).To(Equal("amd64"))
	g.Expect(cfg.Config.User).To(Equal("65532:65532"))
	g.Expect(cfg.Config.Entrypoint).To(Equal([]string{"/fleet-manager"}))
	g.Expect(cfg.Config.Labels).To(Equal(m.Annotations))

	layers, err := img.Layers()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(layers).To(HaveLen(1))
	rc, err := layers[0].Uncompressed()
	g.Expect(err).NotTo(HaveOccurred())
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(hdr.ModTime.Equal(opts.Created)).To(BeTrue(), "mtime of %s", hdr.Name)
		files[hdr.Name] = hdr
	}
	g.Expect(files).To(HaveKey("etc/ssl/certs/ca-certificates.crt"))
	g.Expect(files).To(HaveKey("fleet-manager"))
}

// TestImagesAreTaggedWithTheChartsAppVersion: the charts' default image is
// ghcr.io/fleeet-dev/<name> at their appVersion, so that is what make images
// names its images unless told otherwise.
func TestImagesAreTaggedWithTheChartsAppVersion(t *testing.T) {
	g := NewWithT(t)
	opts, err := DefaultOptions(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	for _, name := range Names {
		data, err := os.ReadFile(filepath.Join(opts.Root, "charts", name, "values.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(data)).To(ContainSubstring("repository: "+DefaultRepository+"/"+name+"\n"), "the default repository of charts/%s", name)
		g.Expect(string(data)).To(ContainSubstring(`tag: ""`), "charts/%s defaults its tag to appVersion", name)
		chart, err := os.ReadFile(filepath.Join(opts.Root, "charts", name, "Chart.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(chart)).To(ContainSubstring(fmt.Sprintf("appVersion: %q", opts.Version)))
	}
}

// untar unpacks the regular files and directories of an archive into dir.
func untar(t *testing.T, archive, dir string) {
	t.Helper()
	g := NewWithT(t)
	f, err := os.Open(archive)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		g.Expect(err).NotTo(HaveOccurred())
		path := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			g.Expect(os.MkdirAll(path, 0o755)).To(Succeed())
			continue
		}
		body, err := io.ReadAll(tr)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(path, body, 0o644)).To(Succeed())
	}
}

// TestImagesPushToARegistryUnchanged pushes to a registry (go-containerregistry's
// own, in memory, over plain HTTP on loopback) and reads each image back by
// its tag: the registry holds exactly the digest the build reported.
func TestImagesPushToARegistryUnchanged(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	g := NewWithT(t)
	ctx := context.Background()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	opts, err := DefaultOptions(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	opts.Version, opts.Out = "v0.0.0-test", t.TempDir()
	opts.Repository = strings.TrimPrefix(reg.URL, "http://") + "/fleeet"
	results, err := BuildImages(ctx, opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(PushImages(ctx, results, true)).To(Succeed())
	for _, r := range results {
		ref, err := name.ParseReference(r.Ref, name.Insecure)
		g.Expect(err).NotTo(HaveOccurred())
		desc, err := remote.Head(ref, remote.WithContext(ctx))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(desc.Digest).To(Equal(r.Digest), "digest of %s in the registry", r.Name)
	}
}
