// Package secrets holds how the fleet manager reads Secrets. Its cache
// (NewCache) holds whole only the Secrets the manager writes for itself
// (fleeetv1.ManagedByLabel) and those their owners offered for delivery
// (fleeetv1.DeliverableLabel); of every other Secret it keeps the metadata
// alone, with neither annotations nor managed fields. The Secrets the
// manager reads and does not write — a push Remote's kubeconfig, a
// ClusterProfile's token, Cluster API's kubeconfig — are read from the
// apiserver (Get, Verdicts), only when their cached metadata says they
// exist and, where a reader keeps what it made of one, only when their
// resourceVersion changed; a metadata watch tells controllers that one
// changed. A Secret of the manager's own that lacks the label, because an
// older manager wrote it or someone took the label off, is read from the
// apiserver and labelled again (GetOwned).
package secrets

import (
	"context"
	"errors"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// secretKind is the kind whose reads NewCache's cache divides.
var secretKind = corev1.SchemeGroupVersion.WithKind("Secret")

// Offered selects the Secrets offered for delivery, and Owned those the
// fleet manager writes: together, every Secret its cache holds whole.
var (
	Offered = labels.SelectorFromSet(labels.Set{fleeetv1.DeliverableLabel: "true"})
	Owned   = labels.SelectorFromSet(labels.Set{fleeetv1.ManagedByLabel: fleeetv1.ManagedByManager})
)

// NewCache builds the fleet manager's cache (ctrl.Options.NewCache) from
// opts, which must say nothing of Secrets.
//
// Whole Secrets come from two informers, one for Offered and one for
// Owned, since one label selector cannot ask for one label or another;
// Get, List, GetInformer and IndexField of corev1.Secret read and watch
// both as one. A metav1.PartialObjectMetadata of kind Secret (a
// builder.OnlyMetadata watch, a metadata Get) reads a third informer,
// which holds every Secret's metadata with annotations and managed fields
// dropped: kubectl's last-applied-configuration annotation holds a
// Secret's data whole. Every other kind is cached as opts says.
func NewCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	if opts.Scheme == nil {
		opts.Scheme = scheme.Scheme // as cache.New defaults it
	}
	offered := opts
	offered.ByObject = maps.Clone(opts.ByObject)
	if offered.ByObject == nil {
		offered.ByObject = map[client.Object]cache.ByObject{}
	}
	offered.ByObject[&corev1.Secret{}] = cache.ByObject{Label: Offered}
	main, err := cache.New(cfg, offered)
	if err != nil {
		return nil, err
	}
	owned, err := cache.New(cfg, secretsOnly(opts, cache.ByObject{Label: Owned}))
	if err != nil {
		return nil, err
	}
	metadata, err := cache.New(cfg, secretsOnly(opts, cache.ByObject{Transform: stripMetadata}))
	if err != nil {
		return nil, err
	}
	return &managerCache{Cache: main, scheme: opts.Scheme, owned: owned, metadata: metadata}, nil
}

// secretsOnly are opts for a cache that is only ever asked for Secrets,
// as by.
func secretsOnly(opts cache.Options, by cache.ByObject) cache.Options {
	return cache.Options{
		HTTPClient: opts.HTTPClient, Scheme: opts.Scheme, Mapper: opts.Mapper,
		SyncPeriod: opts.SyncPeriod, DefaultNamespaces: opts.DefaultNamespaces,
		DefaultWatchErrorHandler: opts.DefaultWatchErrorHandler,
		ByObject:                 map[client.Object]cache.ByObject{&corev1.Secret{}: by},
	}
}

// stripMetadata drops, from a Secret's metadata before it is cached, what
// may hold its data (annotations) and what no reader needs (managed fields).
func stripMetadata(obj any) (any, error) {
	if m, err := apimeta.Accessor(obj); err == nil {
		m.SetAnnotations(nil)
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// managerCache is NewCache's cache: the embedded cache for every kind and
// for offered Secrets, owned for the manager's own Secrets, metadata for
// every Secret's metadata.
type managerCache struct {
	cache.Cache
	scheme          *runtime.Scheme
	owned, metadata cache.Cache
}

// form is what a request asks of Secrets.
type form int

const (
	otherKind form = iota
	wholeSecrets
	secretMetadata
)

// formOf tells what obj, an object or a list, asks for.
func (c *managerCache) formOf(obj runtime.Object) (form, error) {
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return otherKind, err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	return formOfKind(gvk, obj), nil
}

func formOfKind(gvk schema.GroupVersionKind, obj runtime.Object) form {
	if gvk != secretKind {
		return otherKind
	}
	switch obj.(type) {
	case *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		return secretMetadata
	}
	return wholeSecrets
}

// Get reads an offered Secret, or else one of the manager's own.
func (c *managerCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	switch f, err := c.formOf(obj); {
	case err != nil:
		return err
	case f == secretMetadata:
		return c.metadata.Get(ctx, key, obj, opts...)
	case f == wholeSecrets:
		err := c.Cache.Get(ctx, key, obj, opts...)
		if apierrors.IsNotFound(err) {
			return c.owned.Get(ctx, key, obj, opts...)
		}
		return err
	}
	return c.Cache.Get(ctx, key, obj, opts...)
}

// List lists offered Secrets and the manager's own together, each once
// (a Secret may carry both labels); a limit applies to each informer, not
// to the whole.
func (c *managerCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	switch f, err := c.formOf(list); {
	case err != nil:
		return err
	case f == secretMetadata:
		return c.metadata.List(ctx, list, opts...)
	case f == wholeSecrets:
		return c.listWhole(ctx, list, opts...)
	}
	return c.Cache.List(ctx, list, opts...)
}

func (c *managerCache) listWhole(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	more, ok := list.DeepCopyObject().(client.ObjectList)
	if !ok {
		return errors.New("listing Secrets: the list does not copy into a list")
	}
	if err := c.Cache.List(ctx, list, opts...); err != nil {
		return err
	}
	if err := c.owned.List(ctx, more, opts...); err != nil {
		return err
	}
	items, err := apimeta.ExtractList(list)
	if err != nil {
		return err
	}
	extra, err := apimeta.ExtractList(more)
	if err != nil {
		return err
	}
	seen := map[types.UID]bool{}
	for _, o := range items {
		seen[o.(metav1.Object).GetUID()] = true
	}
	for _, o := range extra {
		if !seen[o.(metav1.Object).GetUID()] {
			items = append(items, o)
		}
	}
	return apimeta.SetList(list, items)
}

// GetInformer returns, for whole Secrets, one informer over both.
func (c *managerCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	switch f, err := c.formOf(obj); {
	case err != nil:
		return nil, err
	case f == secretMetadata:
		return c.metadata.GetInformer(ctx, obj, opts...)
	case f == wholeSecrets:
		offered, err := c.Cache.GetInformer(ctx, obj, opts...)
		if err != nil {
			return nil, err
		}
		owned, err := c.owned.GetInformer(ctx, obj, opts...)
		if err != nil {
			return nil, err
		}
		return newUnionInformer(offered, owned), nil
	}
	return c.Cache.GetInformer(ctx, obj, opts...)
}

// GetInformerForKind returns, for Secrets, one informer over both whole
// Secret informers, as GetInformer does for a corev1.Secret.
func (c *managerCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if gvk != secretKind {
		return c.Cache.GetInformerForKind(ctx, gvk, opts...)
	}
	offered, err := c.Cache.GetInformerForKind(ctx, gvk, opts...)
	if err != nil {
		return nil, err
	}
	owned, err := c.owned.GetInformerForKind(ctx, gvk, opts...)
	if err != nil {
		return nil, err
	}
	return newUnionInformer(offered, owned), nil
}

// RemoveInformer removes, for whole Secrets, both informers.
func (c *managerCache) RemoveInformer(ctx context.Context, obj client.Object) error {
	switch f, err := c.formOf(obj); {
	case err != nil:
		return err
	case f == secretMetadata:
		return c.metadata.RemoveInformer(ctx, obj)
	case f == wholeSecrets:
		return errors.Join(c.Cache.RemoveInformer(ctx, obj), c.owned.RemoveInformer(ctx, obj))
	}
	return c.Cache.RemoveInformer(ctx, obj)
}

// IndexField indexes, for whole Secrets, both informers.
func (c *managerCache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	switch f, err := c.formOf(obj); {
	case err != nil:
		return err
	case f == secretMetadata:
		return c.metadata.IndexField(ctx, obj, field, extract)
	case f == wholeSecrets:
		if err := c.Cache.IndexField(ctx, obj, field, extract); err != nil {
			return err
		}
		return c.owned.IndexField(ctx, obj, field, extract)
	}
	return c.Cache.IndexField(ctx, obj, field, extract)
}

// Start runs the three caches until ctx ends or one of them fails, which
// stops the others.
func (c *managerCache) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	caches := []cache.Cache{c.Cache, c.owned, c.metadata}
	done := make(chan error, len(caches))
	for _, each := range caches {
		go func() { done <- each.Start(ctx) }()
	}
	var first error
	for range caches {
		if err := <-done; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

// WaitForCacheSync waits for every informer of the three caches.
func (c *managerCache) WaitForCacheSync(ctx context.Context) bool {
	synced := true
	for _, each := range []cache.Cache{c.Cache, c.owned, c.metadata} {
		synced = each.WaitForCacheSync(ctx) && synced
	}
	return synced
}

// unionInformer is several informers as one, as controller-runtime's
// multi-namespace cache joins one informer per namespace: a handler added
// hears every one of them, and it has synced once all have. A Secret
// moving from one to the other (its label changed) is a deletion from one
// and an addition to the other.
type unionInformer struct {
	informers []cache.Informer
	synced    chan struct{}
}

var _ cache.Informer = &unionInformer{}

func newUnionInformer(informers ...cache.Informer) *unionInformer {
	u := &unionInformer{informers: informers, synced: make(chan struct{})}
	go func() {
		for _, i := range informers {
			<-i.HasSyncedChecker().Done()
		}
		close(u.synced)
	}()
	return u
}

func (u *unionInformer) add(add func(cache.Informer) (toolscache.ResourceEventHandlerRegistration, error)) (toolscache.ResourceEventHandlerRegistration, error) {
	var regs []toolscache.ResourceEventHandlerRegistration
	for _, i := range u.informers {
		reg, err := add(i)
		if err != nil {
			return nil, err
		}
		regs = append(regs, reg)
	}
	return newUnionRegistration(regs), nil
}

func (u *unionInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return u.add(func(i cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return i.AddEventHandler(h)
	})
}

func (u *unionInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return u.add(func(i cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return i.AddEventHandlerWithResyncPeriod(h, resync)
	})
}

func (u *unionInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return u.add(func(i cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return i.AddEventHandlerWithOptions(h, opts)
	})
}

func (u *unionInformer) RemoveEventHandler(reg toolscache.ResourceEventHandlerRegistration) error {
	r, ok := reg.(*unionRegistration)
	if !ok || len(r.regs) != len(u.informers) {
		return errors.New("the registration is not one this informer returned")
	}
	var errs []error
	for k, i := range u.informers {
		errs = append(errs, i.RemoveEventHandler(r.regs[k]))
	}
	return errors.Join(errs...)
}

func (u *unionInformer) AddIndexers(indexers toolscache.Indexers) error {
	for _, i := range u.informers {
		if err := i.AddIndexers(indexers); err != nil {
			return err
		}
	}
	return nil
}

func (u *unionInformer) HasSynced() bool {
	for _, i := range u.informers {
		if !i.HasSynced() {
			return false
		}
	}
	return true
}

func (u *unionInformer) HasSyncedChecker() toolscache.DoneChecker { return u }

func (u *unionInformer) Name() string {
	names := make([]string, 0, len(u.informers))
	for _, i := range u.informers {
		names = append(names, i.HasSyncedChecker().Name())
	}
	return strings.Join(names, " and ")
}

func (u *unionInformer) Done() <-chan struct{} { return u.synced }

func (u *unionInformer) IsStopped() bool {
	for _, i := range u.informers {
		if !i.IsStopped() {
			return false
		}
	}
	return true
}

// unionRegistration is a handler's registration with each informer of a
// unionInformer.
type unionRegistration struct {
	regs   []toolscache.ResourceEventHandlerRegistration
	synced chan struct{}
}

func newUnionRegistration(regs []toolscache.ResourceEventHandlerRegistration) *unionRegistration {
	r := &unionRegistration{regs: regs, synced: make(chan struct{})}
	go func() {
		for _, reg := range regs {
			<-reg.HasSyncedChecker().Done()
		}
		close(r.synced)
	}()
	return r
}

func (r *unionRegistration) HasSynced() bool {
	for _, reg := range r.regs {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
}

func (r *unionRegistration) HasSyncedChecker() toolscache.DoneChecker { return r }

func (r *unionRegistration) Name() string {
	names := make([]string, 0, len(r.regs))
	for _, reg := range r.regs {
		names = append(names, reg.HasSyncedChecker().Name())
	}
	return strings.Join(names, " and ")
}

func (r *unionRegistration) Done() <-chan struct{} { return r.synced }
