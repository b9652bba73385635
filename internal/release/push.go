package release

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PushImages writes each built image to the registry its Ref names, with
// the credentials of the user's Docker config (`docker login`, or a
// credential helper it names). plainHTTP allows plain HTTP, for a registry
// on loopback.
func PushImages(ctx context.Context, images []Image, plainHTTP bool) error {
	var opts []name.Option
	if plainHTTP {
		opts = append(opts, name.Insecure)
	}
	for _, im := range images {
		ref, err := name.ParseReference(im.Ref, opts...)
		if err != nil {
			return fmt.Errorf("image name %s: %w", im.Ref, err)
		}
		if err := remote.Write(ref, im.Image, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("pushing %s: %w", im.Ref, err)
		}
	}
	return nil
}
