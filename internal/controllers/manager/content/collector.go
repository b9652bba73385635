// Package content holds the manager's collector of CompiledSyncs and
// CompiledPlans: it deletes what no plan names any more, once it has stayed
// so for a grace period.
package content

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
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

// Field indexes the collector looks referrers up by.
const (
	// contentIndex indexes ProxyAssemblages, and CompiledPlans, by the
	// CompiledSyncs their entries name.
	contentIndex = "spec.content"
	// plansIndex indexes ProxyAssemblages by the CompiledPlans they name,
	// for entries and for stamps.
	plansIndex = "spec.compiledPlans"
)

// DefaultGrace is how long a CompiledSync or CompiledPlan no plan names is
// kept: an hour, so that a rollback soon after a rollout, or a Remote that
// goes back to an older version, finds its content still there. A
// rollback after that compiles the same sync again, which the compiler
// stores under the same name.
const DefaultGrace = time.Hour

// newborn is how long after its creation what is collected is left
// unmarked (or Grace, when shorter): the compiler stores content before it
// writes the plans naming it, so content just created is not yet named by
// design, and marking it then would only have the compiler take the mark
// off again, a webhook-judged write each way, while a fleet's first plans
// are written.
const newborn = 30 * time.Second

// Collector deletes the CompiledSyncs and CompiledPlans that nothing has
// named for Grace. A CompiledPlan is named by plans; a CompiledSync by
// plans and by CompiledPlans, so it outlives the last CompiledPlan naming
// it by a grace period of its own. The collector marks an object it finds
// unreferenced (UnreferencedAnnotation) and deletes it, on the version it
// marked, once the mark is Grace old and still nothing names it; the
// compiler removes the mark of an object it is about to name again, which
// makes that delete fail.
type Collector struct {
	// Client reads from the cache and writes CompiledSyncs and
	// CompiledPlans.
	Client client.Client
	// Grace is how long what is unreferenced is kept; zero for
	// DefaultGrace.
	Grace time.Duration
	// Now is the clock; nil for time.Now.
	Now func() time.Time
}

// SetupWithManager registers the collector: each CompiledSync and
// CompiledPlan is looked at when it appears and whenever a plan (or, for a
// CompiledSync, a CompiledPlan) stops naming it.
func (c *Collector) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &fleeetv1.ProxyAssemblage{}, contentIndex, func(o client.Object) []string {
		return contentNames(o.(*fleeetv1.ProxyAssemblage).Spec.Assemblage.Syncs)
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &fleeetv1.CompiledPlan{}, contentIndex, func(o client.Object) []string {
		return contentNames(o.(*fleeetv1.CompiledPlan).Spec.Entries)
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &fleeetv1.ProxyAssemblage{}, plansIndex, func(o client.Object) []string {
		return planNames(o.(*fleeetv1.ProxyAssemblage))
	}); err != nil {
		return err
	}
	syncs := &collect[*fleeetv1.CompiledSync]{Collector: c, kind: "CompiledSync", new: func() *fleeetv1.CompiledSync { return &fleeetv1.CompiledSync{} },
		referrers: []referrer{{&fleeetv1.ProxyAssemblageList{}, contentIndex}, {&fleeetv1.CompiledPlanList{}, contentIndex}}}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("compiledsync-collector").
		For(&fleeetv1.CompiledSync{}).
		Watches(&fleeetv1.ProxyAssemblage{}, dropped(func(pa *fleeetv1.ProxyAssemblage) []string { return contentNames(pa.Spec.Assemblage.Syncs) })).
		Watches(&fleeetv1.CompiledPlan{}, dropped(func(cp *fleeetv1.CompiledPlan) []string { return contentNames(cp.Spec.Entries) })).
		Complete(syncs); err != nil {
		return err
	}
	plans := &collect[*fleeetv1.CompiledPlan]{Collector: c, kind: "CompiledPlan", new: func() *fleeetv1.CompiledPlan { return &fleeetv1.CompiledPlan{} },
		referrers: []referrer{{&fleeetv1.ProxyAssemblageList{}, plansIndex}}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("compiledplan-collector").
		For(&fleeetv1.CompiledPlan{}).
		Watches(&fleeetv1.ProxyAssemblage{}, dropped(planNames)).
		Complete(plans)
}

// contentNames lists the CompiledSyncs entries name.
func contentNames(entries []fleeetv1.NamedSync) []string {
	var names []string
	for _, s := range entries {
		if s.Content != "" {
			names = append(names, s.Content)
		}
	}
	return names
}

// planNames lists the CompiledPlans pa names.
func planNames(pa *fleeetv1.ProxyAssemblage) []string {
	var names []string
	for _, name := range []string{pa.Spec.CompiledPlan, pa.Annotations[fleeetv1.CompiledPlanAnnotation]} {
		if name != "" {
			names = append(names, name)
		}
	}
	return names
}

// dropped queues, when an object of type T changes or goes, what it named
// (names) before and no longer does.
func dropped[T client.Object](names func(T) []string) handler.EventHandler {
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], before client.Object, after client.Object) {
		b, ok := before.(T)
		if !ok {
			return
		}
		kept := map[string]bool{}
		if a, ok := after.(T); ok {
			for _, name := range names(a) {
				kept[name] = true
			}
		}
		for _, name := range names(b) {
			if !kept[name] {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKey{Namespace: b.GetNamespace(), Name: name}})
			}
		}
	}
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object, nil)
		},
	}
}

// referrer is a kind that may name what is collected, listed by an index.
type referrer struct {
	list  client.ObjectList
	index string
}

// collect collects objects of one kind, T.
type collect[T client.Object] struct {
	*Collector
	kind      string
	new       func() T
	referrers []referrer
}

// Reconcile keeps an object something names (without a mark), marks one
// nothing names once it is past newborn, and deletes one whose mark is
// Grace old.
func (c *collect[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	o := c.new()
	if err := c.Client.Get(ctx, req.NamespacedName, o); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	named, err := c.named(ctx, o)
	if err != nil {
		return ctrl.Result{}, err
	}
	mark, marked := o.GetAnnotations()[fleeetv1.UnreferencedAnnotation]
	if named {
		if marked {
			return ctrl.Result{}, client.IgnoreNotFound(plancontent.Mark(ctx, c.Client, o, ""))
		}
		return ctrl.Result{}, nil
	}
	now := c.now()
	if young := min(newborn, c.grace()) - now.Sub(o.GetCreationTimestamp().Time); young > 0 && !marked {
		return ctrl.Result{RequeueAfter: young}, nil
	}
	since, err := time.Parse(time.RFC3339, mark)
	if !marked || err != nil {
		err := plancontent.Mark(ctx, c.Client, o, now.UTC().Format(time.RFC3339))
		return ctrl.Result{RequeueAfter: c.grace()}, client.IgnoreNotFound(err)
	}
	if left := c.grace() - now.Sub(since); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	// On the version marked: a compiler that took the mark off since, to
	// name the object again, makes this a conflict, and it stays.
	uid, rv := o.GetUID(), o.GetResourceVersion()
	err = c.Client.Delete(ctx, o, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	if apierrors.IsConflict(err) {
		return ctrl.Result{Requeue: true}, nil
	}
	if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("deleting %s %s, unreferenced since %s: %w", c.kind, o.GetName(), mark, err)
	}
	log.FromContext(ctx).V(1).Info("Deleted what nothing names", "kind", c.kind, "unreferencedSince", mark)
	return ctrl.Result{}, nil
}

// named reports whether anything names o: whether, not what, since one is
// enough, and a fleet's thousand plans are not copied each time one of
// them drops it.
func (c *collect[T]) named(ctx context.Context, o T) (bool, error) {
	for _, r := range c.referrers {
		list := r.list.DeepCopyObject().(client.ObjectList)
		if err := c.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{r.index: o.GetName()},
			client.Limit(1), client.UnsafeDisableDeepCopy); err != nil {
			return false, err
		}
		if meta.LenList(list) > 0 {
			return true, nil
		}
	}
	return false, nil
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
