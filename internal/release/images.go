// Package release builds what a fleeet release is made of: the OCI images
// of fleet-manager and fleet-agent and the two charts that run them, and
// pushes both to a registry. hack/images and hack/release are its commands.
//
// The images are built without Docker (internal/ociimage): each is one layer
// holding a static linux/amd64 binary, the host's CA bundle and a
// passwd/group naming the non-root user 65532, and is written as an OCI
// image layout archive that `ctr images import` accepts.
//
// The images are reproducible: the binaries are built with -trimpath and no
// VCS stamp, every timestamp (file mtimes, config and history, the created
// annotation) is the commit time or SOURCE_DATE_EPOCH, and the layer's entries
// are written in a fixed order, so the same commit gives the same digests.
package release

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	"github.com/fleeet-dev/fleeet/internal/ociimage"
)

// Names are the images built, each from ./cmd/<name>; each is run by the
// chart of the same name under charts/.
var Names = []string{"fleet-manager", "fleet-agent"}

const (
	// SourceURL is the org.opencontainers.image.source annotation.
	SourceURL = "https://github.com/fleeet-dev/fleeet"
	// DefaultRepository prefixes the image names unless told otherwise; the
	// charts' default images are under it.
	DefaultRepository = "ghcr.io/fleeet-dev"
)

// Options say what to build and where to put it.
type Options struct {
	// Root is the module's directory, where `go build` runs.
	Root string
	// Out is the directory the archives are written to.
	Out string
	// Version stamps internal/version.Version and is the images' tag.
	Version string
	// Repository prefixes each image's name: <Repository>/<name>:<Version>.
	Repository string
	// Revision is the commit the images are built from.
	Revision string
	// Created is every timestamp the images carry.
	Created time.Time
}

// Image is one image built and written to its archive.
type Image struct {
	// Name is the binary's, the image's and its chart's name.
	Name string
	// Repository is <Options.Repository>/<name>, the image's name without a tag.
	Repository string
	// Ref is <Repository>:<version>, where it is pushed to.
	Ref string
	// Archive is the OCI layout archive it was written to.
	Archive string
	// Digest is the image manifest's digest, the same in every registry.
	Digest v1.Hash
	// Image is the image itself.
	Image v1.Image
}

// DefaultOptions reads the module root, version, revision and creation time
// from the checkout the command runs in.
func DefaultOptions(ctx context.Context) (Options, error) {
	root, err := output(ctx, "", "go", "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return Options{}, fmt.Errorf("finding the module root: %w", err)
	}
	opts := Options{Root: root, Revision: "unknown", Created: time.Unix(0, 0).UTC()}
	if opts.Version, err = chartsAppVersion(root); err != nil {
		return Options{}, err
	}
	if r, err := output(ctx, root, "git", "rev-parse", "HEAD"); err == nil {
		opts.Revision = r
	}
	if epoch := os.Getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		sec, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return Options{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a number of seconds: %w", epoch, err)
		}
		opts.Created = time.Unix(sec, 0).UTC()
	} else if c, err := output(ctx, root, "git", "log", "-1", "--format=%cI"); err == nil {
		t, err := time.Parse(time.RFC3339, c)
		if err != nil {
			return Options{}, fmt.Errorf("parsing the commit time %q: %w", c, err)
		}
		opts.Created = t.UTC()
	}
	return opts, nil
}

// BuildImages builds every binary and writes its image archive into opts.Out.
func BuildImages(ctx context.Context, opts Options) ([]Image, error) {
	ca, err := os.ReadFile(ociimage.CABundle)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is missing; install the ca-certificates package (apt-get install ca-certificates)", ociimage.CABundle)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle: %w", err)
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", opts.Out, err)
	}
	var images []Image
	for _, name := range Names {
		bin, err := ociimage.GoBinary(ctx, opts.Root, "./cmd/"+name,
			"-X github.com/fleeet-dev/fleeet/internal/version.Version="+opts.Version)
		if err != nil {
			return nil, err
		}
		img, err := ociimage.Build(ociimage.Spec{
			Name:     name,
			Binary:   bin,
			CABundle: ca,
			Created:  opts.Created,
			Annotations: map[string]string{
				"org.opencontainers.image.title":    name,
				"org.opencontainers.image.version":  opts.Version,
				"org.opencontainers.image.revision": opts.Revision,
				"org.opencontainers.image.source":   SourceURL,
				"org.opencontainers.image.created":  opts.Created.Format(time.RFC3339),
			},
		})
		if err != nil {
			return nil, fmt.Errorf("assembling the %s image: %w", name, err)
		}
		im := Image{
			Name:       name,
			Repository: opts.Repository + "/" + name,
			Archive:    filepath.Join(opts.Out, name+".oci.tar"),
			Image:      img,
		}
		im.Ref = im.Repository + ":" + opts.Version
		if im.Digest, err = img.Digest(); err != nil {
			return nil, err
		}
		if err := ociimage.WriteArchive(img, im.Ref, im.Archive, opts.Created); err != nil {
			return nil, fmt.Errorf("writing %s: %w", im.Archive, err)
		}
		images = append(images, im)
	}
	return images, nil
}

// chartsAppVersion is the appVersion of the charts that run the images,
// which must agree.
func chartsAppVersion(root string) (string, error) {
	var version string
	for _, name := range Names {
		path := filepath.Join(root, "charts", name, "Chart.yaml")
		data, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		var chart struct {
			AppVersion string `json:"appVersion"`
		}
		if err := yaml.Unmarshal(data, &chart); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if chart.AppVersion == "" || (version != "" && chart.AppVersion != version) {
			return "", fmt.Errorf("%s: appVersion %q; every chart under charts/ must set the same appVersion", path, chart.AppVersion)
		}
		version = chart.AppVersion
	}
	return version, nil
}

// output runs a command in dir and returns its trimmed standard output.
func output(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}
