package remote

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// readPlan reads every part the plan of the Remote key may be split over
// (fleeetv1.PlanPartName), part 0 first, a nil entry for a part that does
// not exist: those part 0 lists, and any it no longer lists that are not
// deleted yet.
func readPlan(ctx context.Context, c client.Reader, key client.ObjectKey) (fleeetv1.ProxyPlan, error) {
	plan := make(fleeetv1.ProxyPlan, fleeetv1.MaxPlanParts)
	for k, name := range fleeetv1.PlanPartNames(key.Name) {
		pa := &fleeetv1.ProxyAssemblage{}
		err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, pa)
		if client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		if err == nil {
			plan[k] = pa
		}
	}
	return plan, nil
}

// syncsOf are the syncs of every part of plan that exists.
func syncsOf(plan fleeetv1.ProxyPlan) []fleeetv1.NamedSync {
	var syncs []fleeetv1.NamedSync
	for _, pa := range plan {
		if pa != nil {
			syncs = append(syncs, pa.Spec.Assemblage.Syncs...)
		}
	}
	return syncs
}

// planOfPart reconciles the Remote whose plan the changed ProxyAssemblage
// is a part of.
var planOfPart = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
	name, _ := fleeetv1.PlanOfPart(o.GetName())
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
})
