// Package policyconfig holds the manager's policy ConfigMap controller: the
// ConfigMaps labelled fleeet.dev/policy=true in the manager's namespace hold
// user Rego, which it compiles into the policy engine without a restart.
package policyconfig

import (
	"context"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/policy"
)

// Reconciler loads user policies.
type Reconciler struct {
	// Client reads ConfigMaps from the cache.
	Client client.Client
	// Engine receives the compiled policies.
	Engine *policy.Engine
	// Namespace is the manager's namespace, the only one read.
	Namespace string
	// Recorder records loads and rejections on the ConfigMaps.
	Recorder events.EventRecorder
}

// SetupWithManager registers the controller for labelled ConfigMaps in the
// manager's namespace.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	isPolicy := func(o client.Object) bool {
		return o.GetNamespace() == r.Namespace && o.GetLabels()[fleeetv1.PolicyLabel] == "true"
	}
	// A ConfigMap that loses its label must be seen too, so its Rego leaves.
	ours := predicate.NewPredicateFuncs(isPolicy)
	ours.UpdateFunc = func(e event.UpdateEvent) bool { return isPolicy(e.ObjectOld) || isPolicy(e.ObjectNew) }
	return ctrl.NewControllerManagedBy(mgr).
		Named("policy-configmaps").
		For(&corev1.ConfigMap{}, builder.WithPredicates(ours)).
		Complete(r)
}

// Reconcile recompiles the whole set of user policies on any change. Keys
// ending in .rego are modules, named <ConfigMap>/<key> in error messages.
// When the set does not compile, the set in force stays, and each
// ConfigMap that fails on its own gets a warning event saying why.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cms := &corev1.ConfigMapList{}
	if err := r.Client.List(ctx, cms, client.InNamespace(r.Namespace), client.MatchingLabels{fleeetv1.PolicyLabel: "true"}); err != nil {
		return ctrl.Result{}, err
	}
	all := map[string]string{}
	byCM := map[string]map[string]string{}
	for _, cm := range cms.Items {
		if !cm.DeletionTimestamp.IsZero() {
			continue
		}
		mods := map[string]string{}
		for key, src := range cm.Data {
			if strings.HasSuffix(key, ".rego") {
				mods[cm.Name+"/"+key] = src
			}
		}
		maps.Copy(all, mods)
		byCM[cm.Name] = mods
	}
	err := r.Engine.SetUserPolicies(ctx, all)
	if err == nil {
		log.FromContext(ctx).Info("User policies in force", "modules", slices.Sorted(maps.Keys(all)))
		if cm := find(cms.Items, req.Name); cm != nil {
			r.Recorder.Eventf(cm, nil, corev1.EventTypeNormal, fleeetv1.ReasonPolicyLoaded, "Compile", "Policies compiled and in force (%d module(s) from %d ConfigMap(s))", len(all), len(byCM))
		}
		return ctrl.Result{}, nil
	}
	log.FromContext(ctx).Error(err, "User policies rejected; the previous policies stay in force")
	for name, mods := range byCM {
		if own := r.Engine.Check(ctx, mods); own != nil || name == req.Name {
			if own == nil {
				own = err
			}
			r.Recorder.Eventf(find(cms.Items, name), nil, corev1.EventTypeWarning, fleeetv1.ReasonPolicyRejected, "Compile",
				"Policy rejected, the previous policies stay in force: %v", own)
		}
	}
	return ctrl.Result{}, nil
}

func find(cms []corev1.ConfigMap, name string) *corev1.ConfigMap {
	for i := range cms {
		if cms[i].Name == name {
			return &cms[i]
		}
	}
	return nil
}
