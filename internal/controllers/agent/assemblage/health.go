package assemblage

import (
	"context"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/flux"
)

// assemblageOfWorkload maps a Deployment, StatefulSet or DaemonSet to the
// Assemblage whose sync applied it. Flux labels what it applies with the
// name and namespace of its Kustomization or HelmRelease; the agent labels
// those with their Assemblage. Anything else maps to nothing.
func (r *Reconciler) assemblageOfWorkload(ctx context.Context, obj client.Object) []reconcile.Request {
	labels := obj.GetLabels()
	for _, applier := range []struct {
		group string
		obj   client.Object
	}{
		{kustomizev1.GroupVersion.Group, &kustomizev1.Kustomization{}},
		{helmv2.GroupVersion.Group, &helmv2.HelmRelease{}},
	} {
		name, ns := labels[applier.group+"/name"], labels[applier.group+"/namespace"]
		if name == "" || ns == "" {
			continue
		}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, applier.obj); err != nil {
			continue
		}
		if asm := applier.obj.GetLabels()[fleeetv1.AssemblageLabel]; asm != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: asm}}}
		}
	}
	return nil
}

// podCountsChanged passes a workload's creation and deletion, and updates
// that change how many pods it wants or has ready: the rest of a workload's
// status churns during a rollout without changing its sync's health.
var podCountsChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		oldReady, oldDesired, _ := flux.WorkloadPods(e.ObjectOld)
		newReady, newDesired, _ := flux.WorkloadPods(e.ObjectNew)
		return oldReady != newReady || oldDesired != newDesired
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}
