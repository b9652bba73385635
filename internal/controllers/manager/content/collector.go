// Package content holds the manager's collector of CompiledSyncs: it
// deletes the content no plan names any more, once it has stayed so for a
// grace period.
package content

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// contentIndex indexes ProxyAssemblages by the CompiledSyncs their syncs
// name.
const contentIndex = "spec.assemblage.syncs.content"

// DefaultGrace is how long a CompiledSync no plan names is kept: an hour,
// so that a rollback soon after a rollout, or a Remote that goes back to
// an older version, finds its content still there. A rollback after that
// compiles the same sync again, which the compiler stores under the same
// name.
const DefaultGrace = time.Hour

// Collector deletes the CompiledSyncs that no plan has named for Grace. It
// marks a CompiledSync it finds unreferenced (UnreferencedAnnotation) and
// deletes it, on the version it marked, once the mark is Grace old and
// still no plan names it; the compiler removes the mark of content it is
// about to name again, which makes that delete fail.
type Collector struct {
	// Client reads from the cache and writes CompiledSyncs.
	Client client.Client
	// Grace is how long unreferenced content is kept; zero for DefaultGrace.
	Grace time.Duration
	// Now is the clock; nil for time.Now.
	Now func() time.Time
}

// SetupWithManager registers the collector: each CompiledSync is looked at
// when it appears and whenever a plan stops naming it.
func (c *Collector) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &fleeetv1.ProxyAssemblage{}, contentIndex, func(o client.Object) []string {
		return contentNames(o.(*fleeetv1.ProxyAssemblage))
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("compiledsync-collector").
		For(&fleeetv1.CompiledSync{}).
		Watches(&fleeetv1.ProxyAssemblage{}, handler.Funcs{
			UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				enqueueDropped(q, e.ObjectOld.(*fleeetv1.ProxyAssemblage), e.ObjectNew.(*fleeetv1.ProxyAssemblage))
			},
			DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				if pa, ok := e.Object.(*fleeetv1.ProxyAssemblage); ok {
					enqueueDropped(q, pa, nil)
				}
			},
		}).
		Complete(c)
}

// contentNames lists the CompiledSyncs pa names.
func contentNames(pa *fleeetv1.ProxyAssemblage) []string {
	var names []string
	for _, s := range pa.Spec.Assemblage.Syncs {
		if s.Content != "" {
			names = append(names, s.Content)
		}
	}
	return names
}

// enqueueDropped queues the CompiledSyncs before names and after (nil when
// deleted) does not.
func enqueueDropped(q workqueue.TypedRateLimitingInterface[reconcile.Request], before, after *fleeetv1.ProxyAssemblage) {
	kept := map[string]bool{}
	if after != nil {
		for _, name := range contentNames(after) {
			kept[name] = true
		}
	}
	for _, name := range contentNames(before) {
		if !kept[name] {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKey{Namespace: before.Namespace, Name: name}})
		}
	}
}

// Reconcile keeps a CompiledSync a plan names (without a mark), marks one
// none names, and deletes one whose mark is Grace old.
func (c *Collector) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cs := &fleeetv1.CompiledSync{}
	if err := c.Client.Get(ctx, req.NamespacedName, cs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Whether any plan names it, not which: one is enough, and a fleet's
	// thousand plans are not copied each time one of them drops it.
	plans := &fleeetv1.ProxyAssemblageList{}
	if err := c.Client.List(ctx, plans, client.InNamespace(cs.Namespace), client.MatchingFields{contentIndex: cs.Name}, client.Limit(1), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	mark, marked := cs.Annotations[fleeetv1.UnreferencedAnnotation]
	if len(plans.Items) > 0 {
		if marked {
			return ctrl.Result{}, client.IgnoreNotFound(plancontent.Mark(ctx, c.Client, cs, ""))
		}
		return ctrl.Result{}, nil
	}
	now := c.now()
	since, err := time.Parse(time.RFC3339, mark)
	if !marked || err != nil {
		err := plancontent.Mark(ctx, c.Client, cs, now.UTC().Format(time.RFC3339))
		return ctrl.Result{RequeueAfter: c.grace()}, client.IgnoreNotFound(err)
	}
	if left := c.grace() - now.Sub(since); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	// On the version marked: a compiler that took the mark off since, to
	// name the content again, makes this a conflict, and it stays.
	err = c.Client.Delete(ctx, cs, client.Preconditions{UID: &cs.UID, ResourceVersion: &cs.ResourceVersion})
	if apierrors.IsConflict(err) {
		return ctrl.Result{Requeue: true}, nil
	}
	if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("deleting CompiledSync %s, unreferenced since %s: %w", cs.Name, mark, err)
	}
	log.FromContext(ctx).V(1).Info("Deleted CompiledSync no plan names", "unreferencedSince", mark)
	return ctrl.Result{}, nil
}

func (c *Collector) grace() time.Duration {
	if c.Grace > 0 {
		return c.Grace
	}
	return DefaultGrace
}

func (c *Collector) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
