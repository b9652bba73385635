// Package finalizer adds and releases fleeet's finalizers with merge
// patches, so a controller holding a stale copy of an object does not fail
// on a conflict with status writers.
package finalizer

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// Add puts the finalizer on obj unless it is there already.
func Add(ctx context.Context, c client.Client, obj client.Object, name string) error {
	if controllerutil.ContainsFinalizer(obj, name) {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	controllerutil.AddFinalizer(obj, name)
	if err := c.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", name, err)
	}
	return nil
}

// Release takes the finalizer off obj, letting its deletion finish; an
// object already gone is not an error.
func Release(ctx context.Context, c client.Client, obj client.Object, name string) error {
	if !controllerutil.ContainsFinalizer(obj, name) {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	controllerutil.RemoveFinalizer(obj, name)
	return client.IgnoreNotFound(c.Patch(ctx, obj, patch))
}
