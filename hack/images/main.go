// Command images builds the OCI images of fleet-manager and fleet-agent
// without Docker and writes them as OCI layout archives (internal/release
// says what they hold and why the same commit gives the same digests).
//
// The tag defaults to the charts' appVersion, so the charts' default image
// (ghcr.io/fleeet-dev/<name>, tag appVersion) is exactly what this builds.
// hack/release builds the same images for a release, with its charts.
//
// Usage (from `make images` and `make images-push`):
//
//	go run ./hack/images [--out bin/images] [--version 1.2.3] [--repository ghcr.io/fleeet-dev] [--push [--plain-http]]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/fleeet-dev/fleeet/internal/release"
)

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
	repository := fl.String("repository", release.DefaultRepository, "registry and path prefix of the image names")
	pushed := fl.Bool("push", false, "also push the images to the registry --repository names")
	plainHTTP := fl.Bool("plain-http", false, "with --push, talk plain HTTP to the registry (a registry on loopback)")
	if err := fl.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	opts, err := release.DefaultOptions(ctx)
	if err != nil {
		return err
	}
	opts.Out, opts.Repository = *out, *repository
	if *version != "" {
		opts.Version = *version
	}
	images, err := release.BuildImages(ctx, opts)
	if err != nil {
		return err
	}
	if *pushed {
		if err := release.PushImages(ctx, images, *plainHTTP); err != nil {
			return err
		}
	}
	for _, im := range images {
		fmt.Fprintf(stdout, "%s %s %s\n", im.Name, im.Ref, im.Digest)
	}
	return nil
}
