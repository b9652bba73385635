// Package module holds the manager's Module controller: it drives each
// Module's rollout across the Remotes it selects and aggregates their
// ProxyAssemblage statuses into the Module's status.
package module

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/watches"
)

// Reconciler drives Module rollouts and status.
type Reconciler struct {
	// Concurrent is how many objects reconcile at once.
	Concurrent int
	// Client reads from the cache and writes Module status.
	Client client.Client
}

// SetupWithManager registers the controller. What clusters report
// (ProxyAssemblage status), what the compiler made of a Module (its stamp on
// the plan) and Remote changes that matter to a rollout (labels,
// connectivity, suspension) reach the Modules of the namespace; heartbeats
// do not, and neither do the Module's own
// status writes, since each Module reconcile reads every Remote it selects.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	statusChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, after := e.ObjectOld.(*fleeetv1.ProxyAssemblage), e.ObjectNew.(*fleeetv1.ProxyAssemblage)
		return !equality.Semantic.DeepEqual(before.Status, after.Status) ||
			before.Annotations[fleeetv1.CompiledAnnotation] != after.Annotations[fleeetv1.CompiledAnnotation]
	}}
	selectionChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, after := e.ObjectOld.(*fleeetv1.Remote), e.ObjectNew.(*fleeetv1.Remote)
		return !equality.Semantic.DeepEqual(before.Labels, after.Labels) || before.Offline() != after.Offline() ||
			before.Spec.Suspend != after.Spec.Suspend
	}}
	modules := watches.Referrers(r.Client, func() client.ObjectList { return &fleeetv1.ModuleList{} }, "")
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleeetv1.Module{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&fleeetv1.ProxyAssemblage{}, modules, builder.WithPredicates(statusChanged)).
		Watches(&fleeetv1.Remote{}, modules, builder.WithPredicates(selectionChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Concurrent)}).
		Complete(r)
}

// Reconcile runs one rollout step and records the Module's status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	m := &fleeetv1.Module{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := m.Status.DeepCopy()
	defer func() {
		if err := status.Update(ctx, r.Client, m, *before, m.Status); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()
	m.Status.Version = compile.Version(&m.Spec.Sync)

	targets, bindingErrs, err := r.reconcileSelection(ctx, m)
	if err != nil {
		var invalid *invalidSelectorError
		if errors.As(err, &invalid) {
			m.Status.ObservedGeneration = m.Generation
			status.MarkStalled(m, fleeetv1.ReasonInvalidSelector, err.Error())
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	p := r.reconcileRollout(m, targets, time.Now())
	r.reconcileStatus(m, p, bindingErrs)
	return ctrl.Result{RequeueAfter: p.requeueAfter}, nil
}

type invalidSelectorError struct{ err error }

func (e *invalidSelectorError) Error() string { return e.err.Error() }

// reconcileSelection lists the Remotes the Module selects and, for each,
// whether its ProxyAssemblage holds the current version, from the
// compiler's stamp, and what the cluster reports for it. The binding
// failures the compiler met are returned per Remote.
func (r *Reconciler) reconcileSelection(ctx context.Context, m *fleeetv1.Module) ([]target, []string, error) {
	remotes := &fleeetv1.RemoteList{}
	if err := r.Client.List(ctx, remotes, client.InNamespace(m.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	pas := &fleeetv1.ProxyAssemblageList{}
	if err := r.Client.List(ctx, pas, client.InNamespace(m.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	byName := map[string]*fleeetv1.ProxyAssemblage{}
	for i := range pas.Items {
		byName[pas.Items[i].Name] = &pas.Items[i]
	}
	var targets []target
	var bindingErrs []string
	for i := range remotes.Items {
		remote := &remotes.Items[i]
		ok, err := compile.Selects(m.Spec.Selector, remote)
		if err != nil {
			return nil, nil, &invalidSelectorError{err}
		}
		if !ok {
			continue
		}
		t := target{name: remote.Name, offline: remote.Offline(), suspended: remote.Spec.Suspend}
		if pa := byName[remote.Name]; pa != nil {
			t.holds = compile.Find(pa.Spec.Assemblage.Syncs, m.Name) != nil
			// The compiler's stamp says whether the plan holds what this
			// generation compiles to; a stamp of an older one is out of date.
			stamp, stamped := pa.CompiledSyncs()[m.Name]
			current := stamped && stamp.Generation == m.Generation
			t.updated = t.holds && current && !stamp.Pending
			if current && stamp.BindingError != "" {
				bindingErrs = append(bindingErrs, fmt.Sprintf("remote %s: %s", remote.Name, stamp.BindingError))
			}
			if s := pa.ReportedSync(m.Name); s != nil {
				t.state, t.message, t.health = s.State, s.Message, s.Health
				if s.LastTransitionTime != nil {
					t.readySince = s.LastTransitionTime.Time
				}
			}
		}
		targets = append(targets, t)
	}
	slices.SortFunc(targets, func(a, b target) int { return strings.Compare(a.name, b.name) })
	return targets, bindingErrs, nil
}

// reconcileRollout admits the next Remotes to the current generation. A
// pause recorded for this generation holds until the spec changes or the
// Remote that caused it is repaired: Ready at the current version for
// minReadySeconds, or no longer selected.
func (r *Reconciler) reconcileRollout(m *fleeetv1.Module, targets []target, now time.Time) plan {
	var previous []string
	pausedBy := ""
	if ro := m.Status.Rollout; ro != nil && ro.Generation == m.Generation {
		previous, pausedBy = ro.Admitted, ro.PausedBy
	}
	p := step(m, targets, previous, now)
	if m.Spec.Rollout.Strategy != fleeetv1.RollingUpdateStrategy {
		m.Status.Rollout = nil
		return p
	}
	status := &fleeetv1.RolloutStatus{Generation: m.Generation, Admitted: p.admitted}
	switch {
	case p.pausedBy != nil:
		status.Admitted, status.PausedBy = nil, p.pausedBy.name
	case pausedBy != "" && !repaired(m, targets, pausedBy, now):
		status.Admitted, status.PausedBy = nil, pausedBy
	}
	m.Status.Rollout = status
	return p
}

// repaired reports whether the Remote that paused a rollout no longer holds
// it up: it runs the current version available, or it is no longer selected.
func repaired(m *fleeetv1.Module, targets []target, name string, now time.Time) bool {
	i := slices.IndexFunc(targets, func(t target) bool { return t.name == name })
	if i < 0 {
		return true
	}
	t := targets[i]
	return t.updated && t.available(now, time.Duration(m.Spec.Rollout.MinReadySeconds)*time.Second)
}

// reconcileStatus sets the summary and conditions: Ready once every online
// selected Remote runs the current version Ready; RolloutPaused while a
// failure holds a rolling update.
func (r *Reconciler) reconcileStatus(m *fleeetv1.Module, p plan, bindingErrs []string) {
	m.Status.Summary = p.summary
	m.Status.ObservedGeneration = m.Generation
	s := p.summary
	progress := fmt.Sprintf("%d of %d Remotes ready at %s (%d updated, %d offline)", s.Ready, s.Total, m.Status.Version, s.Updated, s.Offline)
	if s.Suspended > 0 {
		progress = strings.TrimSuffix(progress, ")") + fmt.Sprintf(", %d suspended)", s.Suspended)
	}
	if t := p.podsNotReady; t != nil {
		progress += fmt.Sprintf("; pods not ready on %d: Remote %s reports %s", s.PodsNotReady, t.name, t.health.Summary())
	}

	if ro := m.Status.Rollout; ro != nil && ro.PausedBy != "" {
		msg := fmt.Sprintf("Remote %s failed on generation %d", ro.PausedBy, m.Generation)
		if p.pausedBy != nil && p.pausedBy.message != "" {
			msg += ": " + p.pausedBy.message
		}
		if p.pausedBy != nil && p.pausedBy.health != nil {
			msg += "; workloads: " + p.pausedBy.health.Summary()
		}
		msg += "; repair it (then fleetctl retry " + ro.PausedBy + " if Flux gave up) or change the Module's spec to resume"
		status.SetCondition(&m.Status.Conditions, m.Generation, fleeetv1.RolloutPausedCondition, metav1.ConditionTrue, fleeetv1.ReasonRemoteFailed, msg)
		status.MarkFailed(m, fleeetv1.ReasonRemoteFailed, msg)
		return
	}
	apimeta.RemoveStatusCondition(&m.Status.Conditions, fleeetv1.RolloutPausedCondition)
	switch {
	case m.Spec.Suspend:
		status.MarkFailed(m, fleeetv1.ReasonSuspended, "suspended; "+progress)
	case len(bindingErrs) > 0:
		status.MarkFailed(m, fleeetv1.ReasonBindingFailed, firstFew(bindingErrs))
	case s.Failed > 0:
		status.MarkFailed(m, fleeetv1.ReasonRemoteFailed, progress)
	case p.waiting == 0:
		status.MarkReady(m, fleeetv1.ReasonSucceeded, progress)
	default:
		status.MarkProgressing(m, fleeetv1.ReasonProgressing, progress)
	}
}

func firstFew(msgs []string) string {
	const n = 3
	if len(msgs) <= n {
		return strings.Join(msgs, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(msgs[:n], "; "), len(msgs)-n)
}
