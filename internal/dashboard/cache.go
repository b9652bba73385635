package dashboard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
)

// fleetCache holds the Modules, Remotes and plans of the dashboard's
// namespaces, fed by watches, and tells subscribers which namespace
// changed. Pages are rendered from it, so a page costs no request to the
// apiserver.
type fleetCache struct {
	cache     cache.Cache
	informers []cache.Informer

	mu      sync.Mutex
	lastErr error
	subs    map[chan struct{}]string
}

// newFleetCache watches namespace (every namespace when empty) as cfg's
// user and runs until ctx ends.
func newFleetCache(ctx context.Context, cfg *rest.Config, namespace string) (*fleetCache, error) {
	fc := &fleetCache{subs: map[chan struct{}]string{}}
	opts := cache.Options{
		Scheme:                   fleetview.Scheme,
		DefaultTransform:         cache.TransformStripManagedFields(),
		DefaultWatchErrorHandler: func(_ context.Context, _ *toolscache.Reflector, err error) { fc.setErr(err) },
	}
	if namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	fc.cache = c
	for _, obj := range []client.Object{&fleeetv1.Module{}, &fleeetv1.Remote{}, &fleeetv1.ProxyAssemblage{}} {
		inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return nil, err
		}
		changed := func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if obj, ok := o.(client.Object); ok {
				fc.notify(obj.GetNamespace())
			}
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: changed, UpdateFunc: func(_, o any) { changed(o) }, DeleteFunc: changed,
		}); err != nil {
			return nil, err
		}
		fc.informers = append(fc.informers, inf)
	}
	go func() { _ = c.Start(ctx) }()
	return fc, nil
}

func (fc *fleetCache) setErr(err error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.lastErr = err
}

// synced waits, at most until ctx ends, for every watch to have listed
// its objects; a watch that fails first ends the wait with its error.
func (fc *fleetCache) synced(ctx context.Context) error {
	for {
		done := true
		for _, inf := range fc.informers {
			done = done && inf.HasSynced()
		}
		if done {
			return nil
		}
		fc.mu.Lock()
		err := fc.lastErr
		fc.mu.Unlock()
		if err != nil {
			return fmt.Errorf("reading the fleet: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reading the fleet: still listing Modules, Remotes and plans")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// fleet returns namespace's fleet from the cache. Its objects are the
// cache's own: read them, never change them.
func (fc *fleetCache) fleet(ctx context.Context, namespace string) (*fleetview.Fleet, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := fc.synced(ctx); err != nil {
		return nil, err
	}
	return fleetview.Read(ctx, fc.cache, namespace, client.UnsafeDisableDeepCopy)
}

// subscribe returns a channel that receives after an object of namespace
// changes, and a function that ends the subscription.
func (fc *fleetCache) subscribe(namespace string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.subs[ch] = namespace
	return ch, func() {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		delete(fc.subs, ch)
	}
}

func (fc *fleetCache) notify(namespace string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for ch, ns := range fc.subs {
		if ns == namespace {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}
