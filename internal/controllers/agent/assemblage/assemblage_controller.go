// Package assemblage holds the agent's Assemblage controller: it expands each
// sync of an Assemblage into Flux objects, holds a sync back until every sync
// it depends on is Ready at its desired revision, whatever their kinds, and
// removes dropped syncs in reverse dependency order. A plan split over
// several Assemblages runs as one, under its first part (see readPlan).
package assemblage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/delivery"
	"github.com/fleeet-dev/fleeet/internal/finalizer"
	"github.com/fleeet-dev/fleeet/internal/fleetmetrics"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/readyexpr"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/syncgraph"
)

// unconfinedMessage says why an Assemblage without a ServiceAccount is refused.
const unconfinedMessage = "spec.serviceAccountName: empty, so Flux would apply the syncs with its own, unconfined identity; " +
	"name the tenant's ServiceAccount (the Upstream's or the push Remote's spec.serviceAccountName), " +
	"or start the agent with --allow-unconfined-syncs"

// Reconciler reconciles Assemblages into Flux objects.
type Reconciler struct {
	// Client reads Flux objects from the cache and writes them.
	Client client.Client
	// ReadAs returns a reader acting as a downstream ServiceAccount: the
	// objects sync bindings refer to are read, uncached, as the Assemblage's
	// ServiceAccount, so a binding reads exactly what that tenant's syncs
	// could, never what the agent may.
	ReadAs func(namespace, serviceAccount string) (client.Reader, error)
	// APIReader reads, uncached and as the agent, the pods of a workload
	// short of ready pods, to say why; the events of a HelmRelease that
	// detects drift, to count it; and, only with AllowUnconfined, the
	// objects the bindings of an Assemblage without a ServiceAccount refer to.
	APIReader client.Reader
	// AllowUnconfined lets an Assemblage that names no ServiceAccount run:
	// Flux applies its syncs as itself and its bindings are read as the
	// agent. Off, such an Assemblage is Stalled and nothing is applied.
	AllowUnconfined bool
	// Recorder records events on Assemblages.
	Recorder events.EventRecorder
	// FieldOwner is the server-side apply field manager for Flux objects.
	FieldOwner string
	// Concurrent is how many Assemblages reconcile at once.
	Concurrent int
	// FetchJitter spreads the fetches a new version causes across a fleet:
	// a sync's new spec is applied after a delay of up to this long, drawn
	// per agent and spec. Zero applies at once.
	FetchJitter time.Duration

	jitter *jitter
	drifts driftReads
}

// SetupWithManager registers the controller. Changes to the Flux objects an
// Assemblage owns, status included, trigger its reconcile, and so do changes
// to the pod counts of the workloads Flux applied for it: readiness and
// health arrive by watch, never by polling.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.jitter = newJitter(r.FetchJitter, rand.Uint64())
	// Delivered Secrets arriving release the syncs waiting for them: whoever
	// delivers records them on the Assemblage (delivery.Ledger).
	// A further part of a plan split over several Assemblages reconciles
	// its plan's part 0, which reads it.
	b := flux.Owns(ctrl.NewControllerManagedBy(mgr).For(&fleeetv1.Assemblage{}, builder.WithPredicates(firstParts))).
		Watches(&fleeetv1.Assemblage{}, handler.EnqueueRequestsFromMapFunc(firstPartOf), builder.WithPredicates(furtherParts))
	for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet"} {
		b = b.Watches(flux.NewWorkload(kind), handler.EnqueueRequestsFromMapFunc(r.assemblageOfWorkload),
			builder.WithPredicates(podCountsChanged))
	}
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Concurrent)}).
		Complete(r)
}

// Reconcile brings one Assemblage's Flux objects to its spec. Status is
// written in one deferred patch so every exit records what happened.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	asm := &fleeetv1.Assemblage{}
	if err := r.Client.Get(ctx, req.NamespacedName, asm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer status.NewPatcher(r.Client, r.Recorder, asm).Finish(ctx, &retErr)

	if !asm.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, asm)
	}
	if err := finalizer.Add(ctx, r.Client, asm, fleeetv1.AssemblageFinalizer); err != nil {
		return ctrl.Result{}, err
	}

	plan, parts, incomplete, err := r.readPlan(ctx, asm)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case incomplete != nil:
		// A further part's arrival brings the reconcile back.
		status.MarkProgressing(asm, fleeetv1.ReasonPlanIncomplete,
			fmt.Sprintf("the plan is not whole (%v); nothing is applied or removed until it is", incomplete))
		return ctrl.Result{}, nil
	}
	result, err = r.reconcilePlan(ctx, plan)
	if plan != asm {
		// Pruning deliveries may have written part 0's ledger through
		// the plan, a copy of it read whole.
		asm.ResourceVersion, asm.Annotations = plan.ResourceVersion, plan.Annotations
	}
	if err == nil && plan != asm {
		err = r.reportParts(ctx, asm, plan, parts)
	}
	return result, err
}

// reconcilePlan brings a whole plan's Flux objects to its spec and records
// its status on plan. A plan split over several Assemblages is reconciled
// as one, under its part 0: its Flux objects are labelled with and owned by
// part 0, so a sync moving between parts keeps them.
func (r *Reconciler) reconcilePlan(ctx context.Context, asm *fleeetv1.Assemblage) (ctrl.Result, error) {
	if !r.reconcileConfinement(asm) {
		return ctrl.Result{}, nil
	}
	objs, err := r.observe(ctx, asm)
	if err != nil {
		return ctrl.Result{}, err
	}
	g := syncgraph.Build(asm.Spec.Syncs)
	statuses, wait, err := r.reconcileSyncs(ctx, asm, g, objs)
	if err != nil {
		return ctrl.Result{}, err
	}
	removing, err := r.reconcileRemovals(ctx, asm, objs, asm.Spec.Syncs)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reconcileDeliveries(ctx, asm, objs); err != nil {
		return ctrl.Result{}, err
	}
	r.reconcileStatus(asm, statuses, g, removing)
	return ctrl.Result{RequeueAfter: wait}, nil
}

// reconcileDelete removes every sync in reverse dependency order and lets the
// Assemblage go once nothing is left. An Assemblage marked
// fleeetv1.OrphanAnnotation has its syncs' appliers suspended first, so
// their removal leaves what they applied running.
func (r *Reconciler) reconcileDelete(ctx context.Context, asm *fleeetv1.Assemblage) error {
	objs, err := r.observe(ctx, asm)
	if err != nil {
		return err
	}
	if asm.Annotations[fleeetv1.OrphanAnnotation] == "true" {
		if err := r.suspendAll(ctx, objs); err != nil {
			return err
		}
	}
	removing, err := r.reconcileRemovals(ctx, asm, objs, nil) // keep nothing
	if err != nil {
		return err
	}
	if len(removing) > 0 {
		status.MarkProgressing(asm, fleeetv1.ReasonProgressing, "removing "+strings.Join(removing, ", "))
		return nil
	}
	fleetmetrics.SetSyncs(asm.Namespace, asm.Name, nil)
	return finalizer.Release(ctx, r.Client, asm, fleeetv1.AssemblageFinalizer)
}

// suspendAll suspends every applier not being deleted yet, so that Flux's
// finalizer, once it is deleted, neither prunes what a Kustomization applied
// nor uninstalls a HelmRelease's release.
func (r *Reconciler) suspendAll(ctx context.Context, objs map[string]flux.Objects) error {
	suspend := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`))
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(objs)) {
		a := objs[name].Applier
		if a == nil || !a.GetDeletionTimestamp().IsZero() || flux.Suspended(a) {
			continue
		}
		if err := r.Client.Patch(ctx, a, suspend); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("suspending sync %s to leave what it applied: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// reconcileConfinement refuses an Assemblage that names no ServiceAccount,
// unless AllowUnconfined: every sync is Failed, the Assemblage Stalled with
// fleeetv1.ReasonServiceAccountNameUnset, and nothing is applied or removed until the
// spec changes. It reports whether the Assemblage may go on.
func (r *Reconciler) reconcileConfinement(asm *fleeetv1.Assemblage) bool {
	if asm.Spec.ServiceAccountName != "" || r.AllowUnconfined {
		return true
	}
	statuses := make([]fleeetv1.SyncStatus, 0, len(asm.Spec.Syncs))
	for _, s := range asm.Spec.Syncs {
		statuses = append(statuses, fleeetv1.SyncStatus{Name: s.Name, State: fleeetv1.SyncFailed,
			Message: "not applied: the Assemblage has no spec.serviceAccountName"})
	}
	r.reconcileStatus(asm, statuses, syncgraph.Build(nil), nil)
	status.MarkStalled(asm, fleeetv1.ReasonServiceAccountNameUnset, unconfinedMessage)
	return false
}

// bindingReader is what the Assemblage's bindings are read through: its
// ServiceAccount, or the agent itself when unconfined syncs are allowed.
func (r *Reconciler) bindingReader(asm *fleeetv1.Assemblage) (client.Reader, error) {
	if asm.Spec.ServiceAccountName == "" {
		return r.APIReader, nil
	}
	return r.ReadAs(asm.Namespace, asm.Spec.ServiceAccountName)
}

// observe lists the Flux objects expanded from the Assemblage, by sync name.
func (r *Reconciler) observe(ctx context.Context, asm *fleeetv1.Assemblage) (map[string]flux.Objects, error) {
	return flux.List(ctx, r.Client, asm.Namespace, map[string]string{fleeetv1.AssemblageLabel: asm.Name}, fleeetv1.SyncLabel)
}

// planned is one sync's desired expansion, or why it has none.
type planned struct {
	x   *flux.Expansion
	err error
	// undelivered are the Secrets the sync delivers that are not in the
	// namespace yet; the sync waits for them.
	undelivered []string
	// last is the sync's status as last reported, for a Ready sync to stay
	// Ready while Flux re-checks it (flux.KeepReadyThroughRecheck).
	last fleeetv1.SyncStatus
}

// judge reads the sync's Flux objects against its desired revision.
func (p planned) judge(o flux.Objects) flux.Verdict {
	return flux.KeepReadyThroughRecheck(flux.Judge(o, p.x.Want), o, p.last)
}

// specHash is the hash of the spec the sync should run, as the expansion
// records it on its applier. Only a plan without an error has one.
func (p planned) specHash() string {
	return annotation(p.x.Applier, fleeetv1.SpecHashAnnotation)
}

// upToDate reports whether the cluster runs the sync's desired spec: the
// sync expands, its applier exists and was last applied with that spec's
// hash. It is the one place desired and applied specs are compared, so a
// sync gates its dependents, is applied and is judged by the same measure.
func (p planned) upToDate(o flux.Objects) bool {
	return p.err == nil && o.Exists() && o.SpecHash() == p.specHash()
}

// reconcileSyncs applies every sync whose dependencies are all Ready and
// whose fetch jitter is over, and returns each sync's status and how soon
// the next jitter ends. A sync is never removed or rolled back here: one
// whose dependencies are not ready keeps what it runs. Every sync is
// expanded before any is judged, since a sync's gate reads its
// dependencies' plans; syncs are then reconciled in spec order, and an
// apply error on one does not stop the rest.
func (r *Reconciler) reconcileSyncs(ctx context.Context, asm *fleeetv1.Assemblage, g *syncgraph.Graph, objs map[string]flux.Objects) ([]fleeetv1.SyncStatus, time.Duration, error) {
	plans, err := r.expandSyncs(ctx, asm, g)
	if err != nil {
		return nil, 0, err
	}
	statuses := make([]fleeetv1.SyncStatus, 0, len(asm.Spec.Syncs))
	var errs []error
	var soonest time.Duration
	for i := range asm.Spec.Syncs {
		st, wait, err := r.reconcileSync(ctx, asm, asm.Spec.Syncs[i].Name, g, plans, objs)
		if err != nil {
			errs = append(errs, err)
		}
		if wait > 0 && (soonest == 0 || wait < soonest) {
			soonest = wait
		}
		st.Message = clipMessage(st.Message)
		statuses = append(statuses, st)
	}
	return statuses, soonest, errors.Join(errs...)
}

// maxMessage is the longest sync message the Assemblage CRD accepts.
const maxMessage = 4096

// clipMessage cuts a message Flux wrote (a failed Helm action can list a
// whole manifest's worth of objects) to what the status accepts, at a rune
// boundary: one overlong message would otherwise keep every sync's status
// from being written.
func clipMessage(msg string) string {
	if len(msg) <= maxMessage {
		return msg
	}
	const ellipsis = "…"
	cut := maxMessage - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + ellipsis
}

// expandSyncs plans every sync of the Assemblage, by name. Only failing to
// get the reader the bindings are read through is an error; a sync whose
// bindings or expansion fail keeps why in its plan, for its own status and
// its dependents' gates.
func (r *Reconciler) expandSyncs(ctx context.Context, asm *fleeetv1.Assemblage, g *syncgraph.Graph) (map[string]planned, error) {
	reader, err := r.bindingReader(asm)
	if err != nil {
		return nil, err
	}
	delivered := delivery.LedgerOf(asm)
	last := map[string]fleeetv1.SyncStatus{}
	for _, st := range asm.Status.Syncs {
		last[st.Name] = st
	}
	plans := map[string]planned{}
	for i := range asm.Spec.Syncs {
		s := &asm.Spec.Syncs[i]
		p := expandSync(ctx, reader, asm, s, g.Deps[s.Name])
		p.last = last[s.Name]
		for _, secret := range s.Secrets {
			if _, ok := delivered[secret.Name]; !ok {
				p.undelivered = append(p.undelivered, secret.Name)
			}
		}
		plans[s.Name] = p
	}
	return plans, nil
}

// expandSync resolves a sync's bindings through reader, expands the sync
// into the Flux objects that run it, recording deps on its applier so
// removal can run in reverse order, and checks that reader may read what
// Flux reads to run them (checkReads).
func expandSync(ctx context.Context, reader client.Reader, asm *fleeetv1.Assemblage, s *fleeetv1.NamedSync, deps []string) planned {
	values, err := resolveBindings(ctx, reader, asm.Namespace, s.Bindings)
	if err != nil {
		return planned{err: err}
	}
	x, err := flux.Expand(target(asm, s.Name), s, values, deps)
	if err != nil {
		return planned{err: err}
	}
	reads, err := flux.Reads(x)
	if err == nil {
		err = checkReads(ctx, reader, asm.Namespace, reads, s.Secrets)
	}
	if err != nil {
		return planned{err: err}
	}
	return planned{x: x}
}

// reconcileSync brings one sync towards its plan. A sync held by holdSync
// is left as it is; one not up to date is applied once its jitter is over;
// one up to date is judged by its Flux objects' readiness. It returns the
// sync's status, how long the jitter still holds it (0 when it does not)
// and the apply error, if any.
func (r *Reconciler) reconcileSync(ctx context.Context, asm *fleeetv1.Assemblage, name string, g *syncgraph.Graph, plans map[string]planned, objs map[string]flux.Objects) (fleeetv1.SyncStatus, time.Duration, error) {
	p, o := plans[name], objs[name]
	upToDate := p.upToDate(o)
	st, held := holdSync(name, g, plans, objs, upToDate)
	var wait time.Duration
	var err error
	switch {
	case held:
	case !upToDate:
		st, wait, err = r.applyWhenDue(ctx, asm, name, p)
	default:
		v := p.judge(o)
		st.State, st.Revision, st.Message = v.State, v.Revision, v.Message
	}
	r.readSyncHealth(ctx, &st, o)
	if correctionPending(st.Drift, time.Now()) && wait == 0 {
		wait = driftRecheck
	}
	return st, wait, err
}

// holdSync decides whether a sync may not be applied or judged now, and if
// so returns its status: Failed when its dependsOn cannot be evaluated, it
// lies on a dependency cycle or it cannot be expanded; Blocked, naming each
// dependency in BlockedBy, when a dependency is missing or not Ready at its
// desired revision and the sync does not already run its desired spec. A
// sync that does is not held: it keeps what it runs and is judged as usual.
func holdSync(name string, g *syncgraph.Graph, plans map[string]planned, objs map[string]flux.Objects, upToDate bool) (fleeetv1.SyncStatus, bool) {
	st := fleeetv1.SyncStatus{Name: name}
	blockedBy, reasons := blockers(name, g, plans, objs)
	switch {
	case g.Invalid[name] != "":
		st.State, st.Message = fleeetv1.SyncFailed, g.Invalid[name]
	case len(g.Cycles[name]) > 0:
		st.State, st.Message = fleeetv1.SyncFailed, "dependency cycle: "+syncgraph.CycleString(g.Cycles[name])
	case len(blockedBy) > 0 && !upToDate:
		st.State, st.BlockedBy = fleeetv1.SyncBlocked, blockedBy
		st.Message = "waiting for dependencies: " + strings.Join(reasons, "; ")
	case len(plans[name].undelivered) > 0 && !upToDate:
		st.State = fleeetv1.SyncBlocked
		st.Message = "waiting for delivered Secrets: " + strings.Join(plans[name].undelivered, ", ")
	case plans[name].err != nil:
		st.State, st.Message = fleeetv1.SyncFailed, plans[name].err.Error()
	default:
		return st, false
	}
	return st, true
}

// blockers lists the dependencies that hold a sync back, with why each
// does: first those it names that are not in the Assemblage, then, in
// graph order, those not Ready at their desired revision.
func blockers(name string, g *syncgraph.Graph, plans map[string]planned, objs map[string]flux.Objects) (blockedBy, reasons []string) {
	blockedBy, reasons = g.Missing[name], []string{}
	for _, m := range g.Missing[name] {
		reasons = append(reasons, fmt.Sprintf("%s is not in this assemblage", m))
	}
	for _, d := range g.Deps[name] {
		if ok, why := depReady(plans[d], objs[d], g.AnyVersion[name][d], g.ReadyExprs[name][d]); !ok {
			blockedBy = append(blockedBy, d)
			reasons = append(reasons, fmt.Sprintf("%s is %s", d, why))
		}
	}
	return blockedBy, reasons
}

// depReady says whether a dependency, planned as p and holding o, is Ready
// at its desired revision, or at any revision when anyVersion, and if not,
// why. A dependency still running an older spec is not ready even if Flux
// reports it Ready: its dependents wait for the version the Assemblage asks
// for, unless they wait for it at any version. exprs, the dependents'
// readyExprs, decide instead of kstatus whether it is ready: each must hold
// on its Kustomization or HelmRelease.
func depReady(p planned, o flux.Objects, anyVersion bool, exprs []string) (bool, string) {
	if !o.Exists() {
		return false, "not applied yet"
	}
	if !anyVersion {
		if p.err != nil {
			return false, "cannot be expanded: " + p.err.Error()
		}
		if !p.upToDate(o) {
			return false, "not updated to its desired version yet"
		}
	}
	if len(exprs) > 0 {
		return exprsHold(exprs, o)
	}
	var v flux.Verdict
	if anyVersion {
		v = flux.Judge(o, flux.Revision{Any: true})
	} else {
		v = p.judge(o)
	}
	if !v.Ready() {
		return false, fmt.Sprintf("%s: %s", v.State, v.Message)
	}
	return true, ""
}

// exprsHold says whether every readyExpr of exprs holds on the
// dependency's applier in o, and if not, which does not and why.
func exprsHold(exprs []string, o flux.Objects) (bool, string) {
	for _, expr := range exprs {
		holds, err := readyexpr.Holds(expr, o.Applier)
		if err != nil {
			return false, fmt.Sprintf("not ready by its readyExpr %q: %v", expr, err)
		}
		if !holds {
			return false, fmt.Sprintf("not ready by its readyExpr %q", expr)
		}
	}
	return true, ""
}

// applyWhenDue applies a sync that does not run its desired spec once its
// fetch jitter for that spec is over; the sync is Progressing either way.
// It returns the sync's status, how much longer the jitter holds it (0 once
// it is over) and the apply error, which is also the status's message.
func (r *Reconciler) applyWhenDue(ctx context.Context, asm *fleeetv1.Assemblage, name string, p planned) (fleeetv1.SyncStatus, time.Duration, error) {
	st := fleeetv1.SyncStatus{Name: name, State: fleeetv1.SyncProgressing}
	key := asm.Namespace + "/" + asm.Name + "/" + name
	if wait := r.jitter.wait(key, p.specHash(), time.Now()); wait > 0 {
		st.Message = fmt.Sprintf("applying %s in %s (fetch jitter spreads the fleet's fetches)", p.x.Want.String(), wait.Round(time.Second))
		return st, wait, nil
	}
	r.jitter.done(key)
	if err := r.applySync(ctx, asm, name, p.x); err != nil {
		st.Message = err.Error()
		return st, 0, err
	}
	st.Message = "applied " + p.x.Want.String()
	return st, 0, nil
}

// readSyncHealth completes a sync's status from the objects the reconcile
// started with, whatever its state: the revision its applier last applied,
// unless judging the sync already set one, how the workloads it applied
// are doing and what drift Flux found in them.
func (r *Reconciler) readSyncHealth(ctx context.Context, st *fleeetv1.SyncStatus, o flux.Objects) {
	if st.Revision == "" {
		st.Revision = flux.AppliedRevision(o.Applier)
	}
	if o.Exists() {
		st.Health = flux.ReadHealth(ctx, r.Client, r.APIReader, o.Applier)
		st.Drift = r.drifts.read(ctx, r.APIReader, o.Applier, time.Now())
	}
}

// target places a sync's Flux objects in the Assemblage's namespace,
// labelled with the Assemblage and sync, running as the tenant's
// ServiceAccount.
func target(asm *fleeetv1.Assemblage, sync string) flux.Target {
	return flux.Target{
		Owner:              asm.Name,
		Namespace:          asm.Namespace,
		Labels:             map[string]string{fleeetv1.AssemblageLabel: asm.Name, fleeetv1.SyncLabel: sync},
		ServiceAccountName: asm.Spec.ServiceAccountName,
		Retry:              asm.Spec.RetryRequestedAt,
	}
}

// applySync server-side applies a sync's source, then its applier.
func (r *Reconciler) applySync(ctx context.Context, asm *fleeetv1.Assemblage, name string, x *flux.Expansion) error {
	defer func(started time.Time) { fleetmetrics.ApplyDuration.Observe(time.Since(started).Seconds()) }(time.Now())
	for _, obj := range []client.Object{x.Source, x.Applier} {
		if err := flux.Apply(ctx, r.Client, asm, obj, r.FieldOwner); err != nil {
			return fmt.Errorf("applying sync %s: %w", name, err)
		}
	}
	log.FromContext(ctx).Info("Applied sync", "sync", name, "revision", x.Want.String())
	r.Recorder.Eventf(asm, nil, corev1.EventTypeNormal, fleeetv1.ReasonSyncApplied, "Apply",
		"Applied sync %s at %s", name, x.Want.String())
	return nil
}

// reconcileRemovals deletes the Flux objects of syncs not among keep,
// a sync only once no remaining sync that depended on it is left, and
// returns the syncs still being removed.
func (r *Reconciler) reconcileRemovals(ctx context.Context, asm *fleeetv1.Assemblage, objs map[string]flux.Objects, keep []fleeetv1.NamedSync) ([]string, error) {
	inSpec := map[string]bool{}
	for _, s := range keep {
		inSpec[s.Name] = true
	}
	var removing []string
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(objs)) {
		if inSpec[name] {
			continue
		}
		removing = append(removing, name)
		if dependents := dependentsOf(name, objs); len(dependents) > 0 {
			log.FromContext(ctx).V(1).Info("Holding removal until dependents are gone", "sync", name, "dependents", dependents)
			continue
		}
		o := objs[name]
		deleted := false
		for _, obj := range []client.Object{o.Applier, o.Source} {
			if obj == nil || !obj.GetDeletionTimestamp().IsZero() {
				continue
			}
			if err := r.Client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("removing sync %s: %w", name, err))
				continue
			}
			r.drifts.forget(client.ObjectKeyFromObject(obj))
			deleted = true
		}
		if deleted {
			log.FromContext(ctx).Info("Removing sync", "sync", name)
			r.Recorder.Eventf(asm, nil, corev1.EventTypeNormal, fleeetv1.ReasonSyncRemoved, "Delete", "Removing sync %s", name)
		}
	}
	return removing, errors.Join(errs...)
}

// dependentsOf lists the syncs whose applied objects still record a
// dependency on name.
func dependentsOf(name string, objs map[string]flux.Objects) []string {
	var dependents []string
	for other, o := range objs {
		if other == name || o.Applier == nil {
			continue
		}
		if slices.Contains(strings.Split(annotation(o.Applier, fleeetv1.DependsOnAnnotation), ","), name) {
			dependents = append(dependents, other)
		}
	}
	slices.Sort(dependents)
	return dependents
}

// reconcileStatus records the syncs' states, the summary and the conditions
// (see reconcileConditions).
func (r *Reconciler) reconcileStatus(asm *fleeetv1.Assemblage, statuses []fleeetv1.SyncStatus, g *syncgraph.Graph, removing []string) {
	fleetmetrics.SetSyncs(asm.Namespace, asm.Name, statuses)
	r.recordTransitions(asm, statuses)
	sum, failedMsgs := summarize(statuses)
	asm.Status.Syncs, asm.Status.Summary = statuses, sum
	reconcileConditions(asm, sum, failedMsgs, g, removing)
}

// recordTransitions carries a sync's LastTransitionTime over from the last
// recorded status while its state holds and sets it to now when the state
// changes; a sync that turns Failed gets a warning event, so a failure is
// reported once, not on every reconcile.
func (r *Reconciler) recordTransitions(asm *fleeetv1.Assemblage, statuses []fleeetv1.SyncStatus) {
	previous := map[string]fleeetv1.SyncStatus{}
	for _, s := range asm.Status.Syncs {
		previous[s.Name] = s
	}
	now := metav1.Now()
	for i := range statuses {
		st := &statuses[i]
		if prev, ok := previous[st.Name]; ok && prev.State == st.State {
			st.LastTransitionTime = prev.LastTransitionTime
			continue
		}
		st.LastTransitionTime = &now
		if st.State == fleeetv1.SyncFailed {
			r.Recorder.Eventf(asm, nil, corev1.EventTypeWarning, fleeetv1.ReasonSyncFailed, "Reconcile",
				"Sync %s failed: %s", st.Name, st.Message)
		}
	}
}

// summarize counts the syncs by state and says, in order, why each failed
// one did.
func summarize(statuses []fleeetv1.SyncStatus) (fleeetv1.SyncSummary, []string) {
	sum := fleeetv1.SyncSummary{Total: int32(len(statuses))}
	var failedMsgs []string
	for _, st := range statuses {
		switch st.State {
		case fleeetv1.SyncReady:
			sum.Ready++
		case fleeetv1.SyncProgressing:
			sum.Progressing++
		case fleeetv1.SyncBlocked:
			sum.Blocked++
		case fleeetv1.SyncFailed:
			sum.Failed++
			failedMsgs = append(failedMsgs, fmt.Sprintf("%s: %s", st.Name, st.Message))
		}
	}
	return sum, failedMsgs
}

// reconcileConditions sets the Assemblage's conditions, first match wins:
// Stalled (ReasonDependencyCycle) when the dependency graph has a cycle,
// which only a spec change can fix; Ready=False (ReasonSyncFailed) when a
// sync failed; Reconciling (ReasonProgressing) while syncs are progressing,
// blocked or being removed; Ready when every sync is Ready and nothing is
// being removed.
func reconcileConditions(asm *fleeetv1.Assemblage, sum fleeetv1.SyncSummary, failedMsgs []string, g *syncgraph.Graph, removing []string) {
	var cycles []string
	for _, name := range slices.Sorted(maps.Keys(g.Cycles)) {
		// Name each cycle once, from its alphabetically first member.
		if name == slices.Min(g.Cycles[name]) {
			cycles = append(cycles, syncgraph.CycleString(g.Cycles[name]))
		}
	}
	busy := sum.Progressing+sum.Blocked > 0 || len(removing) > 0
	switch {
	case len(cycles) > 0:
		status.MarkStalled(asm, fleeetv1.ReasonDependencyCycle, "dependency cycle: "+strings.Join(cycles, "; "))
	case sum.Failed > 0:
		status.MarkFailed(asm, fleeetv1.ReasonSyncFailed,
			fmt.Sprintf("%d of %d syncs failed: %s", sum.Failed, sum.Total, strings.Join(failedMsgs, "; ")))
	case busy:
		msg := fmt.Sprintf("%d of %d syncs ready", sum.Ready, sum.Total)
		if len(removing) > 0 {
			msg += "; removing " + strings.Join(removing, ", ")
		}
		status.MarkProgressing(asm, fleeetv1.ReasonProgressing, msg)
	default:
		status.MarkReady(asm, fleeetv1.ReasonSucceeded, fmt.Sprintf("%d of %d syncs ready", sum.Ready, sum.Total))
	}
	// Syncs under way keep the Assemblage Reconciling even when another
	// failed or a cycle stalls the rest.
	if busy {
		status.SetCondition(&asm.Status.Conditions, asm.Generation, fleeetv1.ReconcilingCondition, metav1.ConditionTrue, fleeetv1.ReasonProgressing,
			fmt.Sprintf("%d progressing, %d blocked, %d being removed", sum.Progressing, sum.Blocked, len(removing)))
	}
}

func annotation(obj client.Object, key string) string {
	return obj.GetAnnotations()[key]
}
