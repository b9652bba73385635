// Package finalizer adds and releases fleeet's finalizers with merge
// patches locked on the object's resourceVersion: a merge patch replaces
// the whole finalizer list, so an unlocked one made from a stale copy would
// drop a finalizer another writer added since. On a conflict the object is
// read again and the change made afresh, so a controller holding a stale
// copy still gets its write through once it reads the current one.
package finalizer

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// Add puts the finalizer on obj unless it is there already.
func Add(ctx context.Context, c client.Client, obj client.Object, name string) error {
	err := change(ctx, c, obj, func() bool { return controllerutil.AddFinalizer(obj, name) })
	if err != nil {
		return fmt.Errorf("adding finalizer %s: %w", name, err)
	}
	return nil
}

// Release takes the finalizer off obj, letting its deletion finish; an
// object already gone is not an error.
func Release(ctx context.Context, c client.Client, obj client.Object, name string) error {
	err := change(ctx, c, obj, func() bool { return controllerutil.RemoveFinalizer(obj, name) })
	return client.IgnoreNotFound(err)
}

// change applies edit to obj and patches what it changed, locked on obj's
// resourceVersion; on a conflict it reads obj again and starts over. An
// edit that changes nothing writes nothing.
func change(ctx context.Context, c client.Client, obj client.Object, edit func() bool) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		base := obj.DeepCopyObject().(client.Object)
		if !edit() {
			return nil
		}
		err := c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsConflict(err) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
		}
		return err
	})
}
