// Package compiler holds the manager's compiler: the controller that writes
// each Remote's plan, the ProxyAssemblages holding the syncs of every Module
// selecting it, split over further parts when they do not fit one object.
package compiler

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/fleetmetrics"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/shard"
)

// Field indexes the compiler looks objects up by.
const (
	// syncNamesIndex indexes ProxyAssemblages by the names of their own
	// syncs, and compiledPlanIndex by the CompiledPlan holding their other
	// entries, so a Module change finds the Remotes it was compiled into.
	syncNamesIndex    = "spec.assemblage.syncs.name"
	compiledPlanIndex = "spec.compiledPlan"
	// configMapRefsIndex indexes Modules by the ConfigMaps their
	// control-plane bindings read.
	configMapRefsIndex = "spec.controlPlaneBindings.configMap"
)

// Reconciler is the compiler: it writes, for every Remote,
// the ProxyAssemblage of the same name holding the syncs of every Module
// selecting it, split over further parts (fleeetv1.PlanPartName) when they
// do not fit one object.
type Reconciler struct {
	// Shard says which Remotes this replica reconciles; nil for all of
	// them, on the leader alone.
	Shard *shard.Members
	// Concurrent is how many objects reconcile at once.
	Concurrent int
	// Client reads from the cache and writes ProxyAssemblages.
	Client client.Client
	// Recorder records binding failures, policy denials and Modules left
	// out of a plan on Modules.
	Recorder events.EventRecorder
	// MaxPlanBytes is the manager's --max-plan-bytes, the limit of each
	// part of a plan: a plan that would pass it is split over up to
	// fleeetv1.MaxPlanParts parts (compile.Place), and leaves out only the
	// Modules that fit in none instead of being refused whole by admission.
	// Zero for no limit. Each part is bounded by fleeetv1.MaxSyncs syncs as
	// well, so that the cluster can mirror it.
	MaxPlanBytes int
	// Judge, when set, judges each write of a plan part before the
	// compiler makes it, by the policies the admission webhook serves
	// (judgeWrite); nil leaves plans to the webhook alone.
	Judge Judge
	// User is the manager's own user, as the apiserver names it to the
	// webhook: whom Judge's requests say the write is from.
	User authenticationv1.UserInfo

	// revisions remembers the cached Modules' revisions across Remotes.
	revisions compile.Revisions

	// written holds, per ProxyAssemblage (each part of a plan), the
	// resourceVersion of the compiler's own last write, so that its watch
	// event does not compile the Remote again.
	written sync.Map

	// created holds, per CompiledSync or CompiledPlan the compiler created
	// and its cache has not seen yet, when it did (store).
	created sync.Map

	// creating makes the workers that find the same CompiledSync or
	// CompiledPlan missing at once, compiling Remotes at one version, send
	// one create between them: each create is judged by the webhook, the
	// whole sync, before the apiserver finds the name taken.
	creating singleflight.Group

	// refused holds, per CompiledSync or CompiledPlan whose create
	// admission policy refused, the refusal and when it came (store), so that the
	// Remotes compiled next take it as refused without asking again.
	refused sync.Map

	// apiReader reads what the cache has not seen yet; nil without a
	// manager.
	apiReader client.Reader
}

// SetupWithManager registers the compiler and the indexes its map functions
// use, so a change touches only the ProxyAssemblages it affects.
func (c *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	c.apiReader = mgr.GetAPIReader()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &fleeetv1.ProxyAssemblage{}, syncNamesIndex, func(o client.Object) []string {
		var names []string
		for _, s := range o.(*fleeetv1.ProxyAssemblage).Spec.Assemblage.Syncs {
			names = append(names, s.Name)
		}
		return names
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &fleeetv1.ProxyAssemblage{}, compiledPlanIndex, func(o client.Object) []string {
		if name := o.(*fleeetv1.ProxyAssemblage).Spec.CompiledPlan; name != "" {
			return []string{name}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &fleeetv1.Module{}, configMapRefsIndex, func(o client.Object) []string {
		var names []string
		for _, b := range o.(*fleeetv1.Module).Spec.ControlPlaneBindings {
			if ref := b.ObjectFieldRef; ref != nil && ref.Kind == "ConfigMap" {
				names = append(names, ref.Name)
			}
		}
		return names
	}); err != nil {
		return err
	}
	return c.Shard.Complete(ctrl.NewControllerManagedBy(mgr).
		Named("proxyassemblage-compiler").
		// Any Remote change, status included: bindings may read any field.
		For(&fleeetv1.Remote{}).
		// Someone else's change of a plan's spec is undone; the compiler's
		// own writes come back as events too, and are let through only once.
		Owns(&fleeetv1.ProxyAssemblage{}, builder.WithPredicates(predicate.GenerationChangedPredicate{}, predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool { return !c.wroteItself(e.ObjectNew) },
		})).
		Watches(&fleeetv1.Module{}, handler.EnqueueRequestsFromMapFunc(c.remotesOfModule), builder.WithPredicates(compileInputChanged)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(c.remotesOfConfigMap)),
		c.Concurrent, c)
}

// compileInputChanged passes the Module changes that can change a plan: its
// spec, its labels (copied into syncs) and its rollout admissions, not the
// summary and conditions the Module controller keeps rewriting.
var compileInputChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	before, after := e.ObjectOld.(*fleeetv1.Module), e.ObjectNew.(*fleeetv1.Module)
	return before.Generation != after.Generation ||
		!equality.Semantic.DeepEqual(before.Labels, after.Labels) ||
		!equality.Semantic.DeepEqual(before.Status.Rollout, after.Status.Rollout)
}}

// Reconcile compiles one Remote's plan, split over as many
// ProxyAssemblages as it needs (fleeetv1.PlanPartName). Output is
// deterministic (syncs sorted by name) and each part is written only when
// it changed. The steps, in order: delete the plan of a Remote that is gone
// (deletePlan), leave the plan as it is while the Remote may not have a new
// one (planLeftAsIs), compile against what the plan's parts hold, each sync
// whole (reconcileCompile), store the syncs the plan will name in
// CompiledSyncs, holding back the Modules whose content admission refuses
// (reconcileContent), tell the Modules what the compile found (report) and
// write the parts that changed (reconcileWrite). A refused content makes
// the Remote compile again later, under the error backoff: the policy, or
// the Module, may change.
func (c *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	remote := &fleeetv1.Remote{}
	if err := c.Client.Get(ctx, req.NamespacedName, remote); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, c.deletePlan(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if planLeftAsIs(ctx, remote) {
		return ctrl.Result{}, nil
	}
	stored, err := compile.ReadPlan(ctx, c.Client, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	store := plancontent.From(c.contentReader(), req.Namespace)
	held, err := plancontent.ResolvePlan(ctx, stored, store)
	if err != nil {
		return ctrl.Result{}, err
	}
	before, err := heldStamps(ctx, stored, store)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Modules come from the cache uncopied (this runs once per Remote per
	// change) and are only read.
	modules := &fleeetv1.ModuleList{}
	if err := c.Client.List(ctx, modules, client.InNamespace(remote.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	p, err := c.reconcileCompile(ctx, remote, modules.Items, held, before)
	if err != nil {
		return ctrl.Result{}, err
	}
	p, wire, refused, err := c.reconcileContent(ctx, remote, modules.Items, stored, held, before, p)
	if err == nil {
		wire, err = c.share(ctx, remote, wire)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	c.report(ctx, remote, modules.Items, before, p)
	if res, err := c.reconcileWrite(ctx, remote, stored, held, p, wire); err != nil || !res.IsZero() || len(refused) == 0 {
		return res, err
	}
	return ctrl.Result{}, refused
}

// deletePlan deletes every ProxyAssemblage the plan of the Remote key, which
// is gone, may be split over, and forgets the compiler's last writes of them.
func (c *Reconciler) deletePlan(ctx context.Context, key client.ObjectKey) error {
	// The Remote is gone; its plan goes with it.
	for _, name := range fleeetv1.PlanPartNames(key.Name) {
		part := client.ObjectKey{Namespace: key.Namespace, Name: name}
		c.written.Delete(part)
		pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Name: part.Name, Namespace: part.Namespace}}
		if err := c.Client.Delete(ctx, pa); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// planLeftAsIs reports whether the Remote's plan is to be left as it is
// for now: the Remote is being deleted, suspended, or not adopted from its
// registration yet.
func planLeftAsIs(ctx context.Context, remote *fleeetv1.Remote) bool {
	if !remote.DeletionTimestamp.IsZero() {
		return true
	}
	if remote.Spec.Suspend {
		// Nothing new is delivered and nothing is taken away until
		// spec.suspend is cleared; the compile that follows catches up.
		log.FromContext(ctx).V(1).Info("Remote suspended; plan left as it is")
		return true
	}
	if remote.AwaitingAdoption() {
		// Adoption sets the token's labels, which selectors and bindings
		// read; it comes back here as an update of the Remote.
		log.FromContext(ctx).V(1).Info("Remote not adopted from its registration yet; no plan")
		return true
	}
	return false
}

// reconcileCompile compiles the Remote's plan from the Modules of its
// namespace against held, what its parts
// hold now (none when it has no plan), within the manager's size limit
// over at most fleeetv1.MaxPlanParts parts and passing on the Remote's
// retry request, and observes how long compiling took. When compiling
// fails it reports on the Modules (report) what it found; otherwise the
// caller does, once the plan is final.
func (c *Reconciler) reconcileCompile(ctx context.Context, remote *fleeetv1.Remote, modules []fleeetv1.Module, held fleeetv1.ProxyPlan,
	before map[string]fleeetv1.Compiled) (plan, error) {
	started := time.Now()
	retry := remote.Annotations[fleeetv1.RetryAnnotation]
	parts, stamps, err := compile.Plan(ctx, c.Client, modules, remote, compile.Held(held), compile.Limit{MaxBytes: c.MaxPlanBytes,
		MaxSyncs: fleeetv1.MaxSyncs, MaxParts: fleeetv1.MaxPlanParts, RetryRequestedAt: retry}, &c.revisions)
	fleetmetrics.CompileDuration.Observe(time.Since(started).Seconds())
	if err != nil {
		c.report(ctx, remote, modules, before, plan{parts: []fleeetv1.AssemblageSpec{{Syncs: parts.Union()}}, stamps: stamps})
		return plan{}, err
	}
	return planOf(parts, stamps, retry)
}

// reconcileWrite writes the parts of wire, the plan p as the Remote gets
// it, that stored does not hold already: the further parts first, then
// part 0, which lists the revisions they carry and so publishes them, then
// deletes the parts part 0 no longer lists. A reader acts on a plan only
// once every part it lists is read at its revision (AssemblageSpec.Whole),
// so it never sees half of a new plan. held is stored with every sync
// whole, for telling Modules of a refusal.
func (c *Reconciler) reconcileWrite(ctx context.Context, remote *fleeetv1.Remote, stored, held fleeetv1.ProxyPlan, p, wire plan) (ctrl.Result, error) {
	for k := range wire.parts {
		k = (k + 1) % len(wire.parts) // part 0 last
		if wire.heldBy(k, stored[k]) {
			continue
		}
		if res, err := c.writePart(ctx, remote, stored, held, p, wire, k); err != nil || !res.IsZero() {
			return res, err
		}
	}
	for k := len(wire.parts); k < len(stored); k++ {
		if stored[k] == nil {
			continue
		}
		c.written.Delete(client.ObjectKeyFromObject(stored[k]))
		if err := c.Client.Delete(ctx, stored[k]); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("deleting ProxyAssemblage %s/%s, a part the plan no longer lists: %w", remote.Namespace, stored[k].Name, err)
		}
	}
	return ctrl.Result{}, nil
}

// writePart writes part k of wire (the plan p as the Remote gets it): an
// update of stored[k] when the part exists, else a new part the Remote
// owns, once Judge admits it (judgeWrite). It observes the part's size and
// the write's duration, and remembers the write so that its watch event
// does not compile the Remote again. A part the cache has not seen yet is
// compiled again shortly; a part admission policy refuses, in process or
// in the webhook, is told to the Modules it would have changed
// (recordDenial, comparing held and p, every sync whole), and the Remote
// keeps the plan it holds: part 0 is not written, so it lists the parts as
// they were.
func (c *Reconciler) writePart(ctx context.Context, remote *fleeetv1.Remote, stored, held fleeetv1.ProxyPlan, p, wire plan, k int) (ctrl.Result, error) {
	pa, exists := stored[k].DeepCopy(), stored[k] != nil // stored stays the plan as it was read
	var heldSyncs []fleeetv1.NamedSync
	if exists {
		heldSyncs = held[k].Spec.Assemblage.Syncs
	} else {
		pa = &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Name: fleeetv1.PlanPartName(remote.Name, k), Namespace: remote.Namespace}}
		if err := controllerutil.SetControllerReference(remote, pa, c.Client.Scheme()); err != nil {
			return ctrl.Result{}, err
		}
	}
	want := wire.parts[k]
	a := &pa.Spec.Assemblage
	a.Syncs, a.RetryRequestedAt, a.Parts, a.PartRevision = want.Syncs, want.RetryRequestedAt, want.Parts, want.PartRevision
	refs := wire.sharedRefs(k)
	pa.Spec.CompiledPlan = refs.entries
	setAnnotation(&pa.ObjectMeta, fleeetv1.CompiledAnnotation, wire.compiled[k])
	setAnnotation(&pa.ObjectMeta, fleeetv1.CompiledPlanAnnotation, refs.stamps)
	if raw, err := json.Marshal(pa.Spec); err == nil {
		fleetmetrics.PlanBytes.Observe(float64(len(raw)))
	}
	err := c.judgeWrite(ctx, pa, stored[k])
	if err == nil {
		err = c.write(ctx, pa, exists)
	}
	if !exists && apierrors.IsAlreadyExists(err) {
		// The cache has not seen the part this compiler wrote a moment ago
		// (or another replica did): it will, and the compile after that
		// compares against it. Not an error, so no error backoff.
		log.FromContext(ctx).V(1).Info("ProxyAssemblage exists but is not cached yet; compiling again shortly", "part", pa.Name)
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if err != nil {
		if msg, denied := policyDenial(err); denied {
			c.recordDenial(ctx, remote, held.Syncs(), p.union(), heldSyncs, p.parts[k].Syncs, msg)
		}
		return ctrl.Result{}, fmt.Errorf("writing ProxyAssemblage %s/%s: %w", remote.Namespace, pa.Name, err)
	}
	c.written.Store(client.ObjectKeyFromObject(pa), pa.ResourceVersion)
	log.FromContext(ctx).V(1).Info("Compiled ProxyAssemblage", "part", pa.Name, "syncs", len(want.Syncs))
	return ctrl.Result{}, nil
}

// setAnnotation sets the annotation key of meta to value, or removes it
// when value is empty.
func setAnnotation(meta *metav1.ObjectMeta, key, value string) {
	if value != "" {
		metav1.SetMetaDataAnnotation(meta, key, value)
	} else {
		delete(meta.Annotations, key)
	}
}

// write creates pa, or updates it when it exists, and observes how long
// the apiserver took to answer.
func (c *Reconciler) write(ctx context.Context, pa *fleeetv1.ProxyAssemblage, exists bool) error {
	started := time.Now()
	var err error
	if exists {
		err = c.Client.Update(ctx, pa)
	} else {
		err = c.Client.Create(ctx, pa)
	}
	fleetmetrics.PlanWriteDuration.Observe(time.Since(started).Seconds())
	return err
}

// wroteItself reports whether a ProxyAssemblage is as the compiler last
// wrote it.
func (c *Reconciler) wroteItself(pa client.Object) bool {
	rv, ok := c.written.Load(client.ObjectKeyFromObject(pa))
	return ok && rv == pa.GetResourceVersion()
}

// recordDenial tells each Module whose sync a refused part of a plan would
// have added, changed or removed that admission policy refused it for this
// Remote: held and refused are the plan's syncs before and after, heldPart
// and refusedPart the part's. The plan keeps what it held until the policy
// or the Module changes.
func (c *Reconciler) recordDenial(ctx context.Context, remote *fleeetv1.Remote, held, refused, heldPart, refusedPart []fleeetv1.NamedSync, msg string) {
	changed := map[string]bool{}
	for i := range refusedPart {
		if !compile.Same(compile.Find(held, refusedPart[i].Name), &refusedPart[i]) {
			changed[refusedPart[i].Name] = true
		}
	}
	for i := range heldPart {
		if compile.Find(refused, heldPart[i].Name) == nil {
			changed[heldPart[i].Name] = true
		}
	}
	for name := range changed {
		m := &fleeetv1.Module{}
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: remote.Namespace, Name: name}, m); err != nil {
			continue // deleted since: nothing left to tell
		}
		c.Recorder.Eventf(m, remote, corev1.EventTypeWarning, fleeetv1.ReasonPolicyDenied, "Compile",
			"Remote %s: plan refused by admission policy: %s", remote.Name, msg)
	}
}

// heldStamps returns the stamps of every part of stored, read through
// store.
func heldStamps(ctx context.Context, stored fleeetv1.ProxyPlan, store plancontent.Store) (map[string]fleeetv1.Compiled, error) {
	before := map[string]fleeetv1.Compiled{}
	for _, pa := range stored {
		if pa == nil {
			continue
		}
		stamps, err := plancontent.Stamps(ctx, pa, store)
		if err != nil {
			return nil, fmt.Errorf("ProxyAssemblage %s: %w", pa.Name, err)
		}
		maps.Copy(before, stamps)
	}
	return before, nil
}

// report tells each Module of modules, compiled into p against the stamps
// the plan held before, of its binding failure for the Remote, and of its
// being newly left out for the plan's size (not on every compile: any
// Module's change compiles the Remote again). modules are only read.
func (c *Reconciler) report(ctx context.Context, remote *fleeetv1.Remote, modules []fleeetv1.Module, before map[string]fleeetv1.Compiled, p plan) {
	syncs := p.union()
	for i := range modules {
		m := &modules[i]
		stamp, ok := p.stamps[m.Name]
		if ok && stamp.BindingError != "" {
			c.Recorder.Eventf(m, remote, corev1.EventTypeWarning, fleeetv1.ReasonBindingFailed, "Compile",
				"Remote %s: %s", remote.Name, stamp.BindingError)
		}
		if was := before[m.Name]; ok && stamp.TooLarge != "" && (was.TooLarge == "" || was.Generation != stamp.Generation) {
			c.Recorder.Eventf(m, remote, corev1.EventTypeWarning, fleeetv1.ReasonPlanTooLarge, "Compile",
				"%s; the Remote %s, and the other Modules' changes go on", stamp.TooLarge, keeps(syncs, m.Name))
		}
	}
}

// keeps says what a plan holding syncs keeps of Module name, for an event
// saying the Module's change was held back.
func keeps(syncs []fleeetv1.NamedSync, name string) string {
	if kept := compile.Find(syncs, name); kept != nil {
		return "keeps " + compile.Version(&kept.SyncSpec)
	}
	return "holds nothing of it"
}

// remotesOfModule maps a Module to the Remotes it selects now and those a
// part of whose plan holds its sync from an earlier selection.
func (c *Reconciler) remotesOfModule(ctx context.Context, o client.Object) []reconcile.Request {
	m := o.(*fleeetv1.Module)
	seen := map[string]bool{}
	holding := func(field, value string) {
		pas := &fleeetv1.ProxyAssemblageList{}
		if err := c.Client.List(ctx, pas, client.InNamespace(m.Namespace), client.UnsafeDisableDeepCopy, client.MatchingFields{field: value}); err == nil {
			for _, pa := range pas.Items {
				name, _ := fleeetv1.PlanOfPart(pa.Name)
				seen[name] = true
			}
		}
	}
	holding(syncNamesIndex, m.Name)
	cplans := &fleeetv1.CompiledPlanList{}
	if err := c.Client.List(ctx, cplans, client.InNamespace(m.Namespace), client.UnsafeDisableDeepCopy); err == nil {
		for i := range cplans.Items {
			if compile.Find(cplans.Items[i].Spec.Entries, m.Name) != nil {
				holding(compiledPlanIndex, cplans.Items[i].Name)
			}
		}
	}
	remotes := &fleeetv1.RemoteList{}
	if err := c.Client.List(ctx, remotes, client.InNamespace(m.Namespace), client.UnsafeDisableDeepCopy); err == nil {
		for i := range remotes.Items {
			if ok, _ := compile.Selects(m.Spec.Selector, &remotes.Items[i]); ok {
				seen[remotes.Items[i].Name] = true
			}
		}
	}
	var reqs []reconcile.Request
	for name := range seen {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: m.Namespace, Name: name}})
	}
	return reqs
}

// remotesOfConfigMap maps a ConfigMap to the Remotes of the Modules that bind it.
func (c *Reconciler) remotesOfConfigMap(ctx context.Context, o client.Object) []reconcile.Request {
	modules := &fleeetv1.ModuleList{}
	if err := c.Client.List(ctx, modules, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy, client.MatchingFields{configMapRefsIndex: o.GetName()}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range modules.Items {
		reqs = append(reqs, c.remotesOfModule(ctx, &modules.Items[i])...)
	}
	return reqs
}
