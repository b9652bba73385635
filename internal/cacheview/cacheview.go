// Package cacheview reads the objects an informer cache holds in place.
// A client.List from the cache copies every object of a namespace into
// its list even when told not to deep-copy them (each item is copied by
// value into the list's slice); a reader that looks at every Remote and
// plan of a namespace on each reconcile spent most of its time doing so.
package cacheview

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// View reads the cached objects of one kind. What it returns is the
// cache's own object, shared with every other reader and replaced, not
// changed, when the object changes: read it, never write to it.
type View[T client.Object] struct {
	indexer toolscache.Indexer
}

// For returns the view of the kind of example in c, starting its informer
// with c if nothing has asked for it yet.
func For[T client.Object](ctx context.Context, c cache.Cache, example T) (View[T], error) {
	inf, err := c.GetInformer(ctx, example)
	if err != nil {
		return View[T]{}, err
	}
	indexed, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		return View[T]{}, fmt.Errorf("the cache's informer of %T has no indexer", example)
	}
	return View[T]{indexer: indexed.GetIndexer()}, nil
}

// InNamespace returns every cached object of namespace, in no order.
func (v View[T]) InNamespace(namespace string) []T {
	items, err := v.indexer.ByIndex(toolscache.NamespaceIndex, namespace)
	if err != nil { // the informers of a controller-runtime cache always index namespaces
		panic(err)
	}
	out := make([]T, 0, len(items))
	for _, item := range items {
		if o, ok := item.(T); ok {
			out = append(out, o)
		}
	}
	return out
}

// Get returns the cached object named key, and whether there is one.
func (v View[T]) Get(key client.ObjectKey) (T, bool) {
	item, exists, err := v.indexer.GetByKey(key.String())
	o, ok := item.(T)
	return o, err == nil && exists && ok
}
