package main

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// push writes each built image to the registry its ref names, with the
// credentials of the user's Docker config (`docker login`, or a
// credential helper it names). insecure allows plain HTTP, for a registry
// on loopback.
func push(ctx context.Context, results []result, insecure bool) error {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	for _, r := range results {
		ref, err := name.ParseReference(r.ref, opts...)
		if err != nil {
			return fmt.Errorf("image name %s: %w", r.ref, err)
		}
		if err := remote.Write(ref, r.image, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("pushing %s: %w", r.ref, err)
		}
	}
	return nil
}
