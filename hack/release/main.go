// Command release publishes fleeet to an OCI registry: it builds the
// fleet-manager and fleet-agent images at a version, pushes them to
// <registry>/<name>, packages both charts at that version with their default
// image pinned to the digest just pushed, pushes each chart as a Helm OCI
// artifact to oci://<registry>/charts/<name>, and prints what it pushed and
// the `helm install` commands that install it.
//
// Credentials come from the user's Helm registry login or Docker config
// (`helm registry login`, `docker login`, or a credential helper one names);
// nothing prints them.
//
// Usage (from `make release REGISTRY=… VERSION=…`):
//
//	go run ./hack/release --registry registry.example.com/fleeet --version 1.2.3 [--out bin/release] [--plain-http]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"helm.sh/helm/v3/pkg/registry"

	"github.com/fleeet-dev/fleeet/internal/release"
)

// semver is a SemVer 2.0 version without build metadata, which an image tag
// cannot hold (`+` is not allowed in a tag).
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?$`)

// options are the command's flags.
type options struct {
	registry, version, out string
	plainHTTP              bool
}

func main() {
	var o options
	flag.StringVar(&o.registry, "registry", "", "registry and path the images and charts are pushed under, e.g. registry.example.com/fleeet")
	flag.StringVar(&o.version, "version", "", "SemVer version of the images and the charts, e.g. 1.2.3 or 1.2.3-rc.1")
	flag.StringVar(&o.out, "out", "bin/release", "directory the image archives and chart packages are written to")
	flag.BoolVar(&o.plainHTTP, "plain-http", false, "talk plain HTTP to the registry (a registry on loopback)")
	flag.Parse()
	if err := publish(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// publish builds, packages and pushes the release o names and prints what
// it pushed to stdout.
func publish(ctx context.Context, o options, stdout io.Writer) error {
	if err := validate(o.registry, o.version, o.plainHTTP); err != nil {
		return err
	}
	opts, err := release.DefaultOptions(ctx)
	if err != nil {
		return err
	}
	opts.Out, opts.Repository, opts.Version = o.out, o.registry, o.version
	images, err := release.BuildImages(ctx, opts)
	if err != nil {
		return err
	}
	if err := release.PushImages(ctx, images, o.plainHTTP); err != nil {
		return err
	}
	client, err := registryClient(o.plainHTTP)
	if err != nil {
		return err
	}
	// The manager's tokens name the agent chart pushed beside it.
	agentChart := "oci://" + o.registry + "/charts/fleet-agent --version " + o.version
	if o.plainHTTP {
		agentChart += " --plain-http"
	}
	var charts []release.Chart
	for _, im := range images {
		var set map[string]string
		if im.Name == "fleet-manager" {
			set = map[string]string{"agentChart": agentChart}
		}
		path, err := release.PackageChart(opts.Root, opts.Out, opts.Version, im, set)
		if err != nil {
			return err
		}
		c, err := release.PushChart(client, o.registry+"/charts", path, opts.Created)
		if err != nil {
			return err
		}
		charts = append(charts, c)
	}
	printSummary(stdout, images, charts, o.plainHTTP)
	return nil
}

// validate refuses a registry or version the release could not push, before
// anything is built.
func validate(reg, version string, plainHTTP bool) error {
	if reg == "" {
		return errors.New("no registry: name one, e.g. make release REGISTRY=registry.example.com/fleeet VERSION=1.2.3")
	}
	if strings.Contains(reg, "://") {
		return fmt.Errorf("registry %q: name it without a scheme, e.g. registry.example.com/fleeet", reg)
	}
	var opts []name.Option
	if plainHTTP {
		opts = append(opts, name.Insecure)
	}
	if _, err := name.NewRepository(reg+"/charts/fleet-manager", opts...); err != nil {
		return fmt.Errorf("registry %q: %w", reg, err)
	}
	switch {
	case version == "":
		return errors.New("no version: give one, e.g. make release REGISTRY=registry.example.com/fleeet VERSION=1.2.3")
	case strings.HasPrefix(version, "v") && semver.MatchString(version[1:]):
		return fmt.Errorf("version %q: write it without the leading v, as %s: it is the charts' version and the images' tag", version, version[1:])
	case !semver.MatchString(version):
		return fmt.Errorf("version %q is not a SemVer version such as 1.2.3 or 1.2.3-rc.1 (build metadata, +…, cannot be an image tag)", version)
	}
	return nil
}

// registryClient is Helm's OCI registry client, with the credentials of
// `helm registry login`, falling back to the Docker config.
func registryClient(plainHTTP bool) (*registry.Client, error) {
	opts := []registry.ClientOption{registry.ClientOptEnableCache(true)}
	if plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("setting up the Helm registry client: %w", err)
	}
	return client, nil
}

// printSummary says what was pushed, each by digest, and how to install it.
func printSummary(w io.Writer, images []release.Image, charts []release.Chart, plainHTTP bool) {
	for _, im := range images {
		fmt.Fprintf(w, "image  %s@%s\n", im.Ref, im.Digest)
	}
	for _, c := range charts {
		fmt.Fprintf(w, "chart  %s:%s@%s\n", c.Ref, c.Version, c.Digest)
	}
	flags := ""
	if plainHTTP {
		flags = " --plain-http"
	}
	fmt.Fprintln(w, "\nInstall:")
	for _, c := range charts {
		set := "--set management.url=https://<the management API as agents reach it>"
		if c.Name == "fleet-agent" {
			set = "--set token=<the enrolment string fleetctl token create prints>"
		}
		fmt.Fprintf(w, "  helm install %s %s --version %s%s -n fleeet-system --create-namespace %s\n",
			c.Name, c.Ref, c.Version, flags, set)
	}
}
