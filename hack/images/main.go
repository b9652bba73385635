// Command images builds the OCI images of fleet-manager and fleet-agent
// without Docker (internal/ociimage): each is one layer holding a static
// linux/amd64 binary, the host's CA bundle and a passwd/group naming the
// non-root user 65532, and is written as an OCI image layout archive that
// `ctr images import` accepts.
//
// The tag defaults to the charts' appVersion, so the charts' default image
// (ghcr.io/fleeet-dev/<name>, tag appVersion) is exactly what this builds.
//
// The images are reproducible: the binaries are built with -trimpath and no
// VCS stamp, every timestamp (file mtimes, config and history, the created
// annotation) is the commit time or SOURCE_DATE_EPOCH, and the layer's entries
// are written in a fixed order, so the same commit gives the same digests.
//
// Usage (from `make images`):
//
//	go run ./hack/images [--out bin/images] [--version v1.2.3] [--repository ghcr.io/fleeet-dev]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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

// binaries are the images built, each from ./cmd/<name>; each has a chart of
// the same name under charts/.
var binaries = []string{"fleet-manager", "fleet-agent"}

const (
	// sourceURL is the org.opencontainers.image.source annotation.
	sourceURL = "https://github.com/fleeet-dev/fleeet"
	// defaultRepository prefixes the image names unless --repository says
	// otherwise; the charts' default images are under it.
	defaultRepository = "ghcr.io/fleeet-dev"
)

// options say what to build and where to put it.
type options struct {
	// root is the module's directory, where `go build` runs.
	root string
	// out is the directory the archives are written to.
	out string
	// version stamps internal/version.Version and is the images' tag.
	version string
	// repository prefixes each image's name: <repository>/<name>:<version>.
	repository string
	// revision is the commit the images are built from.
	revision string
	// created is every timestamp the images carry.
	created time.Time
}

// result is one image written.
type result struct {
	name, ref, archive string
	digest             v1.Hash
	image              v1.Image
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("images", flag.ContinueOnError)
	out := fl.String("out", "bin/images", "directory the <name>.oci.tar archives are written to")
	version := fl.String("version", "", "version stamped into the binaries and used as the tag (default: the charts' appVersion)")
	repository := fl.String("repository", defaultRepository, "registry and path prefix of the image names")
	pushed := fl.Bool("push", false, "also push the images to the registry --repository names")
	insecure := fl.Bool("insecure-registry", false, "with --push, talk plain HTTP to the registry (a registry on loopback)")
	if err := fl.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	opts, err := defaultOptions(ctx)
	if err != nil {
		return err
	}
	opts.out, opts.repository = *out, *repository
	if *version != "" {
		opts.version = *version
	}
	results, err := build(ctx, opts)
	if err != nil {
		return err
	}
	if *pushed {
		if err := push(ctx, results, *insecure); err != nil {
			return err
		}
	}
	for _, r := range results {
		fmt.Fprintf(stdout, "%s %s %s\n", r.name, r.ref, r.digest)
	}
	return nil
}

// defaultOptions reads the module root, version, revision and creation time
// from the checkout the command runs in.
func defaultOptions(ctx context.Context) (options, error) {
	root, err := output(ctx, "", "go", "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return options{}, fmt.Errorf("finding the module root: %w", err)
	}
	opts := options{root: root, revision: "unknown", created: time.Unix(0, 0).UTC()}
	if opts.version, err = chartsAppVersion(root); err != nil {
		return options{}, err
	}
	if r, err := output(ctx, root, "git", "rev-parse", "HEAD"); err == nil {
		opts.revision = r
	}
	if epoch := os.Getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		sec, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return options{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a number of seconds: %w", epoch, err)
		}
		opts.created = time.Unix(sec, 0).UTC()
	} else if c, err := output(ctx, root, "git", "log", "-1", "--format=%cI"); err == nil {
		t, err := time.Parse(time.RFC3339, c)
		if err != nil {
			return options{}, fmt.Errorf("parsing the commit time %q: %w", c, err)
		}
		opts.created = t.UTC()
	}
	return opts, nil
}

// build builds every binary and writes its image archive into opts.out.
func build(ctx context.Context, opts options) ([]result, error) {
	ca, err := os.ReadFile(ociimage.CABundle)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is missing; install the ca-certificates package (apt-get install ca-certificates)", ociimage.CABundle)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle: %w", err)
	}
	if err := os.MkdirAll(opts.out, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", opts.out, err)
	}
	var results []result
	for _, name := range binaries {
		bin, err := ociimage.GoBinary(ctx, opts.root, "./cmd/"+name,
			"-X github.com/fleeet-dev/fleeet/internal/version.Version="+opts.version)
		if err != nil {
			return nil, err
		}
		img, err := ociimage.Build(ociimage.Spec{
			Name:     name,
			Binary:   bin,
			CABundle: ca,
			Created:  opts.created,
			Annotations: map[string]string{
				"org.opencontainers.image.title":    name,
				"org.opencontainers.image.version":  opts.version,
				"org.opencontainers.image.revision": opts.revision,
				"org.opencontainers.image.source":   sourceURL,
				"org.opencontainers.image.created":  opts.created.Format(time.RFC3339),
			},
		})
		if err != nil {
			return nil, fmt.Errorf("assembling the %s image: %w", name, err)
		}
		r := result{
			name:    name,
			ref:     fmt.Sprintf("%s/%s:%s", opts.repository, name, opts.version),
			archive: filepath.Join(opts.out, name+".oci.tar"),
			image:   img,
		}
		if r.digest, err = img.Digest(); err != nil {
			return nil, err
		}
		if err := ociimage.WriteArchive(img, r.ref, r.archive, opts.created); err != nil {
			return nil, fmt.Errorf("writing %s: %w", r.archive, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// chartsAppVersion is the appVersion of the charts that run the images,
// which must agree.
func chartsAppVersion(root string) (string, error) {
	var version string
	for _, name := range binaries {
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
