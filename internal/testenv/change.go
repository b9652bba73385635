package testenv

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Change reads obj, applies change to it and sends the difference as a
// merge patch. A test edits the spec of objects whose status a controller
// keeps writing; an update carrying the resourceVersion just read would
// fail on the conflict, a patch of the changed fields does not.
func Change[T client.Object](ctx context.Context, c client.Client, obj T, change func(T)) error {
	return changeWith(ctx, c, obj, change, func(before client.Object) error {
		return c.Patch(ctx, obj, client.MergeFrom(before))
	})
}

// ChangeStatus is Change for the status subresource: a test writing a
// status the manager or a cluster also writes (a heartbeat, a report)
// meets the apiserver's judgement of its change, never a 409. The patch
// holds only what differs from the object as read, so a required field
// left at its zero value in a status never written before is not sent:
// write such a status whole, with an update.
func ChangeStatus[T client.Object](ctx context.Context, c client.Client, obj T, change func(T)) error {
	return changeWith(ctx, c, obj, change, func(before client.Object) error {
		return c.Status().Patch(ctx, obj, client.MergeFrom(before))
	})
}

func changeWith[T client.Object](ctx context.Context, c client.Reader, obj T, change func(T), patch func(before client.Object) error) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err
	}
	before := obj.DeepCopyObject().(client.Object)
	change(obj)
	return patch(before)
}
