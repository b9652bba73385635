// Package policyconfig holds the manager's policy ConfigMap controller: the
// ConfigMaps labelled fleeet.dev/policy=true in the manager's namespace hold
// user Rego, which it compiles into the policy engine without a restart.
//
// Every replica serves admission, so the controller runs on every replica,
// leader or not, and a replica reports itself ready (Ready) only once the
// user policies present when it started are in force.
package policyconfig

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
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

	// mu serialises loads, so an older list never overwrites a newer one.
	mu sync.Mutex
	// loaded is set once the user policies present at start are in force.
	loaded atomic.Bool
}

// ErrNotLoaded is what Ready says, and what admission should answer, until
// the user policies present at start are in force.
var ErrNotLoaded = errors.New("user policies not loaded yet")

// Loaded tells whether the user policies present at start are in force:
// until then the engine holds only the built-in policies, and admission
// must not be answered with them alone.
func (r *Reconciler) Loaded() bool { return r.loaded.Load() }

// Ready is a readiness check (mgr.AddReadyzCheck) that fails until Loaded.
func (r *Reconciler) Ready(*http.Request) error {
	if !r.Loaded() {
		return ErrNotLoaded
	}
	return nil
}

// SetupWithManager registers the controller for labelled ConfigMaps in the
// manager's namespace, and a first load of them once the cache has synced,
// both on every replica: each serves admission.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.Add(&firstLoad{r: r, cache: mgr.GetCache()}); err != nil {
		return err
	}
	isPolicy := func(o client.Object) bool {
		return o.GetNamespace() == r.Namespace && o.GetLabels()[fleeetv1.PolicyLabel] == "true"
	}
	// A ConfigMap that loses its label must be seen too, so its Rego leaves.
	ours := predicate.NewPredicateFuncs(isPolicy)
	ours.UpdateFunc = func(e event.UpdateEvent) bool { return isPolicy(e.ObjectOld) || isPolicy(e.ObjectNew) }
	return ctrl.NewControllerManagedBy(mgr).
		Named("policy-configmaps").
		For(&corev1.ConfigMap{}, builder.WithPredicates(ours)).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(r)
}

// firstLoad loads the user policies present at start once, whether or not
// any ConfigMap event arrives (none does when there are no policies), and
// then marks the Reconciler Loaded.
type firstLoad struct {
	r     *Reconciler
	cache cache.Cache
}

// NeedLeaderElection is false: every replica loads its own engine.
func (*firstLoad) NeedLeaderElection() bool { return false }

// Start lists and compiles the labelled ConfigMaps, retrying while they
// cannot be listed; a ConfigMap that does not compile does not hold the
// replica back (see load).
func (f *firstLoad) Start(ctx context.Context) error {
	if !f.cache.WaitForCacheSync(ctx) {
		return nil
	}
	for {
		err := f.r.load(ctx, "")
		if err == nil {
			f.r.loaded.Store(true)
			return nil
		}
		log.FromContext(ctx).Error(err, "Listing user policies; the replica stays unready", "namespace", f.r.Namespace)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// Reconcile recompiles the whole set of user policies on any change. Keys
// ending in .rego are modules, named <ConfigMap>/<key> in error messages.
// When the set does not compile, the set in force stays, and each
// ConfigMap that fails on its own gets a warning event saying why.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, r.load(ctx, req.Name)
}

// load compiles the labelled ConfigMaps into the engine, recording the
// outcome on the ConfigMap named changed (empty for the first load). Only a
// failure to list them is an error.
//
// Before the first load has put user policies in force, there is no
// previous set worth keeping: a set that does not compile is narrowed to
// the ConfigMaps that compile on their own, so that the replica starts with
// the built-in policies and every valid user policy, and each invalid one
// is reported by its warning event as later.
func (r *Reconciler) load(ctx context.Context, changed string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cms := &corev1.ConfigMapList{}
	if err := r.Client.List(ctx, cms, client.InNamespace(r.Namespace), client.MatchingLabels{fleeetv1.PolicyLabel: "true"}); err != nil {
		return err
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
		if cm := find(cms.Items, changed); cm != nil {
			r.Recorder.Eventf(cm, nil, corev1.EventTypeNormal, fleeetv1.ReasonPolicyLoaded, "Compile", "Policies compiled and in force (%d module(s) from %d ConfigMap(s))", len(all), len(byCM))
		}
		return nil
	}
	if !r.loaded.Load() {
		return r.loadValid(ctx, cms.Items, byCM, err)
	}
	log.FromContext(ctx).Error(err, "User policies rejected; the previous policies stay in force")
	for name, mods := range byCM {
		if own := r.Engine.Check(ctx, mods); own != nil || name == changed {
			if own == nil {
				own = err
			}
			r.Recorder.Eventf(find(cms.Items, name), nil, corev1.EventTypeWarning, fleeetv1.ReasonPolicyRejected, "Compile",
				"Policy rejected, the previous policies stay in force: %v", own)
		}
	}
	return nil
}

// loadValid puts in force the ConfigMaps that compile on their own, when
// the whole set (which failed with err) does not and no user policies are
// in force yet. Should the valid ones still clash with each other, only the
// built-in policies stay in force.
func (r *Reconciler) loadValid(ctx context.Context, cms []corev1.ConfigMap, byCM map[string]map[string]string, err error) error {
	valid := map[string]string{}
	for name, mods := range byCM {
		if own := r.Engine.Check(ctx, mods); own != nil {
			r.Recorder.Eventf(find(cms, name), nil, corev1.EventTypeWarning, fleeetv1.ReasonPolicyRejected, "Compile",
				"Policy rejected and left out of the policies in force: %v", own)
			continue
		}
		maps.Copy(valid, mods)
	}
	if clash := r.Engine.SetUserPolicies(ctx, valid); clash != nil {
		log.FromContext(ctx).Error(clash, "User policies rejected; only the built-in policies are in force")
		return nil
	}
	log.FromContext(ctx).Error(err, "Some user policies rejected; the others are in force", "modules", slices.Sorted(maps.Keys(valid)))
	return nil
}

func find(cms []corev1.ConfigMap, name string) *corev1.ConfigMap {
	for i := range cms {
		if cms[i].Name == name {
			return &cms[i]
		}
	}
	return nil
}
