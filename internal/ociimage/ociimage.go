// Package ociimage assembles single-binary OCI images without Docker and
// writes them as OCI image layout archives that `ctr images import` accepts.
//
// An image is one layer holding a static linux/amd64 binary at its root, a
// passwd and group naming the non-root user 65532 (distroless' "nonroot"),
// and optionally a CA bundle. Every timestamp is the one the caller gives and
// the layer's entries are written in a fixed order, so the same inputs give
// the same digest.
package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// CABundle is where Debian's ca-certificates package puts the bundle; the
	// image keeps the same path, which Go's crypto/x509 searches first.
	CABundle = "/etc/ssl/certs/ca-certificates.crt"
	// nonRoot is the uid and gid the images run as.
	nonRoot = 65532
	// ContainerdImageName is the index annotation containerd's importer reads
	// the full image name from; org.opencontainers.image.ref.name holds the tag.
	ContainerdImageName = "io.containerd.image.name"
)

// Spec says what goes into an image.
type Spec struct {
	// Name is the binary's file name at the image's root, its entrypoint.
	Name string
	// Binary is a static linux/amd64 executable.
	Binary []byte
	// CABundle, when set, is installed at CABundle.
	CABundle []byte
	// Files are further files, such as a second binary the entrypoint's
	// probes run; their directories are created as needed.
	Files []File
	// Created is every timestamp the image carries.
	Created time.Time
	// Annotations go on the manifest and, as labels, on the config.
	Annotations map[string]string
}

// File is one file of an image.
type File struct {
	// Path is absolute, such as /usr/local/bin/tool.
	Path string
	// Mode holds the permission bits.
	Mode int64
	Body []byte
}

// Build assembles the single-layer image of s.
func Build(s Spec) (v1.Image, error) {
	layer, err := rootfs(s)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: s.Created}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      created,
		Config: v1.Config{
			User:       fmt.Sprintf("%d:%d", nonRoot, nonRoot),
			Entrypoint: []string{"/" + s.Name},
			WorkingDir: "/",
			Labels:     s.Annotations,
		},
	})
	if err != nil {
		return nil, err
	}
	history := "ociimage: " + s.Name + ", passwd"
	if s.CABundle != nil {
		history += ", CA bundle"
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: history},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, s.Annotations).(v1.Image), nil
}

// rootfs is the image's one layer. Entries are written in lexical order, all
// owned by root with the same mtime, so the layer's digest depends only on the
// files' contents.
func rootfs(s Spec) (v1.Layer, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonRoot, nonRoot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonRoot)
	files := map[string]File{
		s.Name:       {Mode: 0o755, Body: s.Binary},
		"etc/group":  {Mode: 0o644, Body: []byte(group)},
		"etc/passwd": {Mode: 0o644, Body: []byte(passwd)},
	}
	if s.CABundle != nil {
		files[strings.TrimPrefix(CABundle, "/")] = File{Mode: 0o644, Body: s.CABundle}
	}
	for _, f := range s.Files {
		files[strings.TrimPrefix(path.Clean(f.Path), "/")] = f
	}
	dirs := map[string]bool{}
	for name := range files {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			dirs[dir+"/"] = true
		}
	}
	names := slices.Collect(maps.Keys(files))
	for dir := range dirs {
		names = append(names, dir)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range names {
		f := files[name]
		hdr := &tar.Header{Name: name, Mode: f.Mode, ModTime: s.Created, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(f.Body))}
		if dirs[name] {
			hdr.Mode, hdr.Typeflag = 0o755, tar.TypeDir
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteArchive writes img as an OCI image layout archive at archive, named ref
// (registry/path/name:tag). The index entry names the image twice: the tag in
// org.opencontainers.image.ref.name (the OCI convention) and the full
// reference in io.containerd.image.name, which `ctr images import` uses as
// the image's name. Every entry of the archive has mtime.
func WriteArchive(img v1.Image, ref, archive string, mtime time.Time) error {
	slash, colon := strings.LastIndex(ref, "/"), strings.LastIndex(ref, ":")
	if colon < slash {
		return fmt.Errorf("image reference %q has no tag", ref)
	}
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref[colon+1:],
		ContainerdImageName:                 ref,
	})); err != nil {
		return err
	}
	return packDir(dir, archive, mtime)
}

// packDir writes the files under dir into a tar at archive, in lexical order and
// with a fixed mtime, so the archive is as reproducible as its contents.
func packDir(dir, archive string, mtime time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if d.IsDir() {
			rel += "/"
		}
		names = append(names, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(archive + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, name := range names {
		hdr := &tar.Header{Name: name, Mode: 0o644, ModTime: mtime, Format: tar.FormatPAX, Typeflag: tar.TypeReg}
		var body []byte
		if strings.HasSuffix(name, "/") {
			hdr.Mode, hdr.Typeflag = 0o755, tar.TypeDir
		} else if body, err = os.ReadFile(filepath.Join(dir, name)); err != nil {
			return err
		}
		hdr.Size = int64(len(body))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), archive)
}

// GoBinary builds the Go package pkg, from the module in dir, as a static
// linux/amd64 binary with -trimpath and no VCS stamp, and returns its
// contents. ldflags are added to "-s -w".
func GoBinary(ctx context.Context, dir, pkg, ldflags string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "ociimage-bin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "-trimpath", "-buildvcs=false",
		"-ldflags", strings.TrimSpace("-s -w "+ldflags), pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building %s: %w\n%s", pkg, err, stderr.Bytes())
	}
	return os.ReadFile(out)
}
