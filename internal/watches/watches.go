// Package watches holds the event handlers fleeet's controllers share to
// turn a change of a watched object into the objects to reconcile.
package watches

import (
	"context"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// SameName reconciles the object of the controller's kind that has the
// changed object's namespace and name, such as the Remote of a Lease.
var SameName = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
})

// Referrers reconciles the objects of newList's kind in the changed
// object's namespace whose field index holds the changed object's name, or
// all of them when index is empty. c must read from the cache.
func Referrers(c client.Reader, newList func() client.ObjectList, index string) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		list := newList()
		opts := []client.ListOption{client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy}
		if index != "" {
			opts = append(opts, client.MatchingFields{index: o.GetName()})
		}
		if err := c.List(ctx, list, opts...); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		_ = apimeta.EachListItem(list, func(obj runtime.Object) error {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj.(client.Object))})
			return nil
		})
		return reqs
	})
}
