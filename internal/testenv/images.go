package testenv

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/fleeet-dev/fleeet/internal/ociimage"
)

// GoImage builds the Go package pkg of this repository (such as
// "./cmd/fleet-agent") as a static binary, assembles the single-layer
// non-root image around it that `make images` would, named ref
// (registry/path:tag), and writes it as an OCI archive in the test's
// temporary directory. It returns the archive's path, for Node.ImportImage.
// The image's entrypoint is the binary, at the root: /<last element of pkg>.
func GoImage(t TB, pkg, ref string) string {
	t.Helper()
	bin, err := ociimage.GoBinary(t.Context(), RepoRoot, pkg, "")
	if err != nil {
		t.Fatal(err)
	}
	return writeImage(t, path.Base(pkg), bin, ref)
}

// writeImage writes the image of one binary as an OCI archive.
func writeImage(t TB, name string, bin []byte, ref string) string {
	t.Helper()
	created := time.Unix(0, 0).UTC()
	img, err := ociimage.Build(ociimage.Spec{Name: name, Binary: bin, Created: created})
	if err != nil {
		t.Fatalf("assembling image %s: %v", ref, err)
	}
	archive := filepath.Join(t.TempDir(), name+".oci.tar")
	if err := ociimage.WriteArchive(img, ref, archive, created); err != nil {
		t.Fatalf("writing image %s: %v", ref, err)
	}
	return archive
}

// pauseBinary is ./internal/testenv/pause, built once per test process.
var pauseBinary = sync.OnceValues(func() ([]byte, error) {
	return ociimage.GoBinary(context.Background(), RepoRoot, "./internal/testenv/pause", "")
})

// writePauseImage writes the sandbox image every node imports.
func writePauseImage(t TB, bin []byte) string {
	t.Helper()
	return writeImage(t, "pause", bin, pauseImage)
}

// cacheImage assembles the image of s and writes it, named ref, as the OCI
// archive at path (in the tools cache), through a temporary name so an
// interrupted build never looks done.
func cacheImage(s ociimage.Spec, ref, archive string) error {
	img, err := ociimage.Build(s)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(archive), 0o755); err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.%d", archive, os.Getpid())
	if err := ociimage.WriteArchive(img, ref, tmp, s.Created); err != nil {
		return err
	}
	return os.Rename(tmp, archive)
}

// MakeImages runs `make images`' command into a directory (shared by the
// packages of a make test run, see sharedBuild, else temporary) and
// returns each image's archive by name (fleet-manager, fleet-agent), named
// as the charts' default images.
func MakeImages(t TB) map[string]string {
	t.Helper()
	build := func(out string) error {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		_, err := runIn(RepoRoot, "go", "run", "./hack/images", "--out", out)
		return err
	}
	out, shared, err := sharedBuild("images", build)
	if !shared {
		out = t.TempDir()
		err = build(out)
	}
	if err != nil {
		t.Fatalf("make images: %v", err)
	}
	return map[string]string{
		"fleet-manager": filepath.Join(out, "fleet-manager.oci.tar"),
		"fleet-agent":   filepath.Join(out, "fleet-agent.oci.tar"),
	}
}
