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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/cacheview"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/promquery"
	"github.com/fleeet-dev/fleeet/internal/rollout/window"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/watches"
)

// Reconciler drives Module rollouts and status.
type Reconciler struct {
	// Concurrent is how many objects reconcile at once.
	Concurrent int
	// Client reads from the cache and writes Module status.
	Client client.Client
	// Recorder records each stage's start, each Remote's admission and each
	// rollback on the Module.
	Recorder events.EventRecorder
	// MaxMoving caps the Remotes moving at once across every rollout of the
	// manager; 0 for no cap. A namespace's own cap is its
	// fleeet.dev/max-moving annotation.
	MaxMoving int
	// Checks asks the checks of rollout stages in the background, so that
	// no reconcile waits on the server; nil when the manager has no server
	// to ask (--prometheus-url), which holds every stage with a check.
	// SetupWithManager runs it and sets its Answered.
	Checks *promquery.Asker

	budget    budget
	durations durations
	stamps    stamps
	notices   notices
	progress  progress

	// remotes and plans read the cached Remotes and plan objects in place:
	// every reconcile looks at every Remote of the namespace and its plan.
	remotes cacheview.View[*fleeetv1.Remote]
	plans   cacheview.View[*fleeetv1.ProxyAssemblage]
}

// SetupWithManager registers the controller. Remote changes that matter to
// a rollout (labels, connectivity, suspension) reach the Modules of the
// namespace, what a cluster reports of a sync (ProxyAssemblage status) the
// sync's Module (planChanged), what the compiler made of a Module (its
// stamp on the plan) that Module;
// heartbeats do not, and neither do the Module's own status writes, since
// each Module reconcile reads every Remote it selects. A change of a Secret
// reaches the Modules whose syncs deliver it, whose status says whether it
// may be delivered.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	var err error
	if r.remotes, err = cacheview.For(context.Background(), mgr.GetCache(), &fleeetv1.Remote{}); err != nil {
		return err
	}
	if r.plans, err = cacheview.For(context.Background(), mgr.GetCache(), &fleeetv1.ProxyAssemblage{}); err != nil {
		return err
	}
	r.stamps.reader = plancontent.Lagging{Cache: mgr.GetClient(), Live: mgr.GetAPIReader()}
	selectionChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, after := e.ObjectOld.(*fleeetv1.Remote), e.ObjectNew.(*fleeetv1.Remote)
		return !equality.Semantic.DeepEqual(before.Labels, after.Labels) || before.Offline() != after.Offline() ||
			before.Spec.Suspend != after.Spec.Suspend
	}}
	modules := watches.Referrers(r.Client, func() client.ObjectList { return &fleeetv1.ModuleList{} }, "")
	deliveredSecrets := watches.Referrers(r.Client, func() client.ObjectList { return &fleeetv1.ModuleList{} }, deliveredSecretsIndex)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &fleeetv1.Module{}, deliveredSecretsIndex, indexDeliveredSecrets); err != nil {
		return err
	}
	dependents := watches.Referrers(r.Client, func() client.ObjectList { return &fleeetv1.ModuleList{} }, dependsOnIndex)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &fleeetv1.Module{}, dependsOnIndex, indexDependsOn); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Checks != nil {
		// An answer to a stage's check brings its Module back.
		answered := make(chan event.GenericEvent, 1024)
		r.Checks.Answered = func(key string) {
			ns, rest, _ := strings.Cut(key, "/")
			name, _, _ := strings.Cut(rest, "/")
			select {
			case answered <- event.GenericEvent{Object: &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}:
			default: // the check's requeue comes back for it
			}
		}
		if err := mgr.Add(r.Checks); err != nil {
			return err
		}
		b = b.WatchesRawSource(source.Channel(answered, &handler.EnqueueRequestForObject{}))
	}
	return b.
		For(&fleeetv1.Module{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// A Module coming, going or selecting other Remotes changes where
		// the Modules depending on it by name are placed without it.
		Watches(&fleeetv1.Module{}, dependents, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&fleeetv1.ProxyAssemblage{}, r.planChanged(modules)).
		Watches(&fleeetv1.Remote{}, modules, builder.WithPredicates(selectionChanged)).
		// The cache holds whole only the Secrets offered for delivery, and
		// the metadata of every Secret (package secrets): the whole watch
		// hears an offered Secret come, go or change, the metadata watch
		// one that is not offered come or go, so the status always says
		// whether each is missing or unoffered. Either may hear of a change
		// first; the other brings the Module back once it has too.
		Watches(&corev1.Secret{}, deliveredSecrets).
		Watches(&corev1.Secret{}, deliveredSecrets, builder.OnlyMetadata).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Concurrent)}).
		Complete(r)
}

// planBatch is how long a Module waits, once a plan change concerns it, for
// more to come before it is reconciled: a version change rewrites every
// plan of the fleet within seconds, and each reconcile reads every Remote
// and plan of the namespace and may write the Module's status. A Module
// already waiting does not wait longer for each further change.
const planBatch = 250 * time.Millisecond

// batched queues each request planBatch from now, or keeps the earlier
// time of one already waiting.
type batched struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
}

func (b batched) Add(req reconcile.Request) { b.AddAfter(req, planBatch) }

// planChanged reconciles, when a plan comes or goes or its report as a
// whole changes (the generation it describes, its conditions), every
// Module of its namespace; when only some syncs' reports change, just
// their Modules; and when only the compiler's stamps change, just the
// Modules whose stamp did: a version change of one Module rewrites every
// plan of the fleet, and each rewrite, or each cluster's report of one
// sync, would otherwise reconcile every Module, each of which reads every
// plan. Each waits planBatch for the plan changes that follow.
func (r *Reconciler) planChanged(modules handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			modules.Create(ctx, e, batched{q})
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			modules.Delete(ctx, e, batched{q})
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q = batched{q}
			before, after := e.ObjectOld.(*fleeetv1.ProxyAssemblage), e.ObjectNew.(*fleeetv1.ProxyAssemblage)
			changed := func(name string) {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: after.Namespace, Name: name}})
			}
			if !equality.Semantic.DeepEqual(before.Status, after.Status) {
				if before.Status.ObservedGeneration != after.Status.ObservedGeneration ||
					!equality.Semantic.DeepEqual(before.Status.Conditions, after.Status.Conditions) {
					modules.Update(ctx, e, q)
					return
				}
				// Only syncs' reports changed: the Modules they belong to.
				for _, name := range changedReports(before.Status.Syncs, after.Status.Syncs) {
					changed(name)
				}
				return
			}
			was, now := r.stamps.of(ctx, before), r.stamps.of(ctx, after)
			for name, stamp := range now.stamps {
				if old, ok := was.stamps[name]; !ok || old != stamp {
					changed(name)
				}
			}
			for name := range was.stamps {
				if _, ok := now.stamps[name]; !ok {
					changed(name)
				}
			}
			// A plan edited by hand: the Modules whose sync came or went.
			for _, pair := range [][2]parsedStamps{{was, now}, {now, was}} {
				for _, name := range pair[0].names() {
					if !pair[1].holds(name) {
						changed(name)
					}
				}
			}
		},
	}
}

// Reconcile runs one rollout step and records the Module's status; a
// status that moved only in its counts waits for progressEvery (progress).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	m := &fleeetv1.Module{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			r.budget.forget(req.NamespacedName)
			r.durations.forget(req.NamespacedName)
			r.notices.forget(req.NamespacedName)
			r.progress.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := m.Status.DeepCopy()
	patcher := status.NewPatcher(r.Client, r.Recorder, m)
	defer patcher.Finish(ctx, &retErr)
	m.Status.Version = compile.Version(&m.Spec.Sync)
	revision := compile.ModuleRevision(m)
	want := revision
	if record := compile.RolledBackTo(m, revision); record != nil {
		want = record.Revision
	}

	windows, problems := window.Parse(m.Spec.Rollout.Windows)
	if len(problems) > 0 {
		status.MarkStalled(m, fleeetv1.ReasonInvalidWindow, window.Describe(problems))
		return ctrl.Result{}, nil
	}
	if shut := window.Describe(window.NeverOpen(windows, time.Now())); r.notices.first(req.NamespacedName, "windows", shut) {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, fleeetv1.ReasonWindowNeverOpens, "Rollout",
			"%s; a window that never opens lets no Remote move", shut)
	}
	targets, notes, err := r.reconcileSelection(ctx, m, want)
	if err != nil {
		var invalid *invalidSelectorError
		if errors.As(err, &invalid) {
			status.MarkStalled(m, fleeetv1.ReasonInvalidSelector, err.Error())
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if unplaced := strings.Join(notes.unplaced, "; "); r.notices.first(req.NamespacedName, "unplaced", unplaced) && unplaced != "" {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, fleeetv1.ReasonDependencyNotPlaced, "Place", "%s", firstFew(notes.unplaced))
	}
	p, err := r.step(ctx, patcher, m, revision, targets, windows)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.reconcileStatus(m, p, notes)
	r.recordHistory(m, revision, p, time.Now())
	r.durations.observe(req.NamespacedName, revision, m.Status.History, time.Now())
	requeue := p.requeueAfter
	if wait := r.progress.hold(req.NamespacedName, m.Generation, before, &m.Status, time.Now()); wait > 0 {
		m.Status = *before // only the counts moved: written once progressEvery has passed
		if requeue == 0 || wait < requeue {
			requeue = wait
		}
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// compileNotes is what the compiler's stamps say went wrong for a Module,
// per Remote.
type compileNotes struct {
	// bindingErrs are the control-plane bindings that did not resolve.
	bindingErrs []string
	// tooLarge are the plans the Module's sync was left out of for their
	// size or count of syncs (compile.Place).
	tooLarge []string
	// undeliverable says why Secrets the sync delivers are not delivered.
	undeliverable []string
	// unplaced says which Modules the sync depends on by name are not
	// placed on some Remotes it is (see unplaced).
	unplaced []string
}

type invalidSelectorError struct{ err error }

func (e *invalidSelectorError) Error() string { return e.err.Error() }

// reconcileSelection lists the Remotes the Module selects and, for each,
// its rollout stage, whether its plan holds the revision want (the current
// one, or the one a rollback returns to), from the compiler's stamp, and
// what the cluster reports for it, both on the part of a split plan that
// holds the sync. The binding failures the
// compiler met, and the plans it left the Module out of for their size, are
// returned per Remote.
func (r *Reconciler) reconcileSelection(ctx context.Context, m *fleeetv1.Module, want string) ([]target, compileNotes, error) {
	var notes compileNotes
	stages := make([]labels.Selector, len(m.Spec.Rollout.Stages))
	for i, st := range m.Spec.Rollout.Stages {
		sel, err := metav1.LabelSelectorAsSelector(&st.Selector)
		if err != nil {
			return nil, notes, &invalidSelectorError{fmt.Errorf("spec.rollout.stages[%s].selector: %w", st.Name, err)}
		}
		stages[i] = sel
	}
	for _, o := range m.Spec.Overrides {
		if _, err := metav1.LabelSelectorAsSelector(&o.Selector); err != nil {
			return nil, notes, &invalidSelectorError{fmt.Errorf("spec.overrides[%s].selector: %w", o.Name, err)}
		}
	}
	remotes := r.remotes.InNamespace(m.Namespace)
	var err error
	if notes.undeliverable, err = r.undeliverable(ctx, m, remotes); err != nil {
		return nil, notes, err
	}
	var targets []target
	var selected []*fleeetv1.Remote
	for _, remote := range remotes {
		ok, err := compile.Selects(m.Spec.Selector, remote)
		if err != nil {
			return nil, notes, &invalidSelectorError{err}
		}
		if !ok {
			continue
		}
		selected = append(selected, remote)
		t := target{name: remote.Name, offline: remote.Offline(), suspended: remote.Spec.Suspend, stage: len(stages)}
		if i := slices.IndexFunc(stages, func(sel labels.Selector) bool { return sel.Matches(labels.Set(remote.Labels)) }); i >= 0 {
			t.stage = i
		}
		if plan := r.planOf(m.Namespace, remote.Name); plan != nil {
			// The sync is in at most one part, which carries its stamp and
			// what the cluster reports for it; a Module whose sync is in no
			// part is stamped on part 0.
			pa := r.stamps.holding(ctx, plan, m.Name)
			t.holds = pa != nil
			if pa == nil {
				pa = plan[0]
			}
			// The compiler's stamp says whether the plan holds what this
			// generation compiles to; a stamp of an older one is out of date.
			stamp, stamped := r.stamps.of(ctx, pa).stamps[m.Name]
			current := stamped && stamp.Generation == m.Generation
			t.updated = t.holds && current && stamp.Revision == want && !stamp.Pending
			if current && stamp.BindingError != "" {
				notes.bindingErrs = append(notes.bindingErrs, fmt.Sprintf("remote %s: %s", remote.Name, stamp.BindingError))
			}
			if current && stamp.TooLarge != "" {
				notes.tooLarge = append(notes.tooLarge, stamp.TooLarge)
			}
			if s := pa.ReportedSync(m.Name); s != nil {
				t.state, t.message, t.health, t.drift = s.State, s.Message, s.Health, s.Drift
				if s.LastTransitionTime != nil {
					t.since = s.LastTransitionTime.Time
				}
			}
		}
		targets = append(targets, t)
	}
	r.stamps.keep(m.Namespace, func(name string) bool {
		_, ok := r.plans.Get(client.ObjectKey{Namespace: m.Namespace, Name: name})
		return ok
	})
	if len(indexDependsOn(m)) > 0 {
		modules := &fleeetv1.ModuleList{}
		if err := r.Client.List(ctx, modules, client.InNamespace(m.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			return nil, notes, err
		}
		byName := make(map[string]*fleeetv1.Module, len(modules.Items))
		for i := range modules.Items {
			byName[modules.Items[i].Name] = &modules.Items[i]
		}
		notes.unplaced = unplaced(m, byName, selected)
	}
	slices.SortFunc(targets, func(a, b target) int { return strings.Compare(a.name, b.name) })
	slices.Sort(notes.tooLarge)
	return targets, notes, nil
}

// planOf returns the parts of the Remote's plan that its part 0 lists
// (ProxyPlan.Listed), read from the cache in place; nil when it has none.
func (r *Reconciler) planOf(namespace, remote string) fleeetv1.ProxyPlan {
	first, ok := r.plans.Get(client.ObjectKey{Namespace: namespace, Name: remote})
	if !ok {
		return nil
	}
	plan := fleeetv1.ProxyPlan{first}
	for k := 1; k <= len(first.Spec.Assemblage.Parts); k++ {
		part, _ := r.plans.Get(client.ObjectKey{Namespace: namespace, Name: fleeetv1.PlanPartName(remote, k)})
		plan = append(plan, part)
	}
	return plan.Listed()
}

// step runs one rollout step within the rollout's windows and the budget
// it shares with other Modules, and records what it has moving.
func (r *Reconciler) step(ctx context.Context, said events.EventRecorder, m *fleeetv1.Module, revision string, targets []target, windows []window.Window) (decision, error) {
	r.budget.mu.Lock()
	defer r.budget.mu.Unlock()
	lim, warning, err := r.budget.limits(ctx, r.Client, m, r.MaxMoving)
	if err != nil {
		return decision{}, err
	}
	if warning != "" {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, fleeetv1.ReasonInvalidBudget, "Rollout", "%s", warning)
	}
	lim.windows = windows
	if r.Checks != nil {
		lim.ask = func(stage, query string, after time.Time) (promquery.Answer, bool) {
			return r.Checks.Ask(m.Namespace+"/"+m.Name+"/"+stage, query, after)
		}
	}
	p := r.reconcileRollout(said, m, revision, targets, lim, time.Now())
	moving := 0
	if m.Status.Rollout != nil {
		moving = int(m.Status.Rollout.Moving)
	}
	r.budget.record(client.ObjectKeyFromObject(m), moving)
	return p, nil
}

// reconcileRollout takes the annotations fleetctl rollout writes, runs one
// rollout step and records it in status.rollout. A pause for a failure holds
// until the failing Remote is repaired (available at the current version,
// or no longer selected) or the revision changes; a rollback holds until the
// revision changes. The events saying what the step changed go to said: the
// reconcile's status.Patcher, which says them once the status is written.
func (r *Reconciler) reconcileRollout(said events.EventRecorder, m *fleeetv1.Module, revision string, targets []target, lim limits, now time.Time) decision {
	previous := &fleeetv1.RolloutStatus{Revision: revision}
	if ro := m.Status.Rollout; ro != nil && ro.Revision == revision {
		previous = ro.DeepCopy()
	}
	p := decide(m, targets, previous, lim, now)
	if m.Spec.Rollout.Strategy != fleeetv1.RollingUpdateStrategy {
		m.Status.Rollout = nil
		return p
	}
	next := &fleeetv1.RolloutStatus{Revision: revision, Admitted: p.admitted, Stage: p.stage, Tracks: p.tracks, Holding: p.holding,
		Approved: previous.Approved, Checked: p.checked, Checks: p.checks, RolledBack: previous.RolledBack}
	m.Status.Rollout = next
	if next.RolledBack == nil && m.Annotations[fleeetv1.UndoAnnotation] == revision &&
		r.rollBack(said, m, revision, nil, "fleetctl rollout undo", now) {
		return p
	}
	switch {
	case next.RolledBack != nil:
		next.Admitted, next.Holding = nil, ""
		return p
	case p.failing && m.Spec.Rollout.OnFailure == fleeetv1.RollbackOnFailure:
		failed := p.failed[0]
		if r.rollBack(said, m, revision, failed, fmt.Sprintf("Remote %s failed: %s", failed.name, failed.reason()), now) {
			return p
		}
		next.Admitted, next.PausedBy = nil, failed.name
		return p
	case p.failing:
		next.Admitted, next.PausedBy = nil, p.failed[0].name
		return p
	case p.checkFailed != "" && m.Spec.Rollout.OnFailure == fleeetv1.RollbackOnFailure &&
		r.rollBack(said, m, revision, nil, p.checkFailed, now):
		return p
	case p.checkFailed != "":
		// Paused everywhere, every track, until the check holds again.
		next.Admitted = nil
		return p
	case previous.PausedBy != "" && !repaired(m, targets, previous.PausedBy, now):
		next.Admitted, next.PausedBy = nil, previous.PausedBy
		return p
	}
	r.noteIgnored(m, revision, p.awaiting, next.Approved)
	if stage, ok := strings.CutPrefix(m.Annotations[fleeetv1.ApproveAnnotation], revision+"/"); ok && slices.Contains(p.awaiting, stage) {
		next.Approved = append(next.Approved, stage)
		said.Eventf(m, nil, corev1.EventTypeNormal, fleeetv1.ReasonStageApproved, "Approve",
			"stage %s of %s approved; the next stage starts", stage, m.Status.Version)
		// The next step starts the next stage, from this status.
		p = decide(m, targets, next, lim, now)
		next.Admitted, next.Stage, next.Tracks, next.Holding = p.admitted, p.stage, p.tracks, p.holding
	}
	next.Moving = int32(p.moving)
	for _, name := range next.Checked {
		if !slices.Contains(previous.Checked, name) {
			said.Eventf(m, nil, corev1.EventTypeNormal, fleeetv1.ReasonStageChecked, "Rollout",
				"stage %s of %s: its check held for %s", name, m.Status.Version, stageCheck(m, name).For.Duration)
		}
	}
	for _, stage := range inProgress(next) {
		if !slices.Contains(inProgress(previous), stage) {
			said.Eventf(m, nil, corev1.EventTypeNormal, fleeetv1.ReasonStageStarted, "Rollout",
				"stage %s of %s started", stage, m.Status.Version)
		}
	}
	for _, name := range next.Admitted {
		if !slices.Contains(previous.Admitted, name) {
			said.Eventf(m, nil, corev1.EventTypeNormal, fleeetv1.ReasonRemoteAdmitted, "Rollout",
				"Remote %s moves to %s%s", name, m.Status.Version, inStage(next.Stage))
		}
	}
	return p
}

// stageCheck returns the check of m's stage name; a stage the status
// names checked has one.
func stageCheck(m *fleeetv1.Module, name string) *fleeetv1.StageCheck {
	for i := range m.Spec.Rollout.Stages {
		if st := &m.Spec.Rollout.Stages[i]; st.Name == name && st.Check != nil {
			return st.Check
		}
	}
	return &fleeetv1.StageCheck{}
}

// inProgress lists the declared stages ro has in progress (or holding
// the next): one per track.
func inProgress(ro *fleeetv1.RolloutStatus) []string {
	var stages []string
	if ro.Stage != "" {
		stages = append(stages, ro.Stage)
	}
	for _, t := range ro.Tracks {
		if t.Stage != "" && !slices.Contains(stages, t.Stage) {
			stages = append(stages, t.Stage)
		}
	}
	return stages
}

func inStage(name string) string {
	if name == "" {
		return ""
	}
	return " (stage " + name + ")"
}

// rollBack records a rollback of revision to the newest version that was
// Ready across the fleet, for the reason given (failed names the Remote
// whose failure started it). It reports false, and records why, when no such
// version exists.
func (r *Reconciler) rollBack(said events.EventRecorder, m *fleeetv1.Module, revision string, failed *target, why string, now time.Time) bool {
	i := slices.IndexFunc(m.Status.History, func(h fleeetv1.RolloutRecord) bool {
		return h.Outcome == fleeetv1.RolloutSucceeded && h.Revision != revision
	})
	if i < 0 {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, fleeetv1.ReasonNothingToRollBackTo, "Rollback",
			"%s: no earlier version was Ready across the fleet to roll back to; the rollout is paused", why)
		return false
	}
	to := m.Status.History[i]
	rb := &fleeetv1.Rollback{To: to.Revision, Version: to.Version, Message: why, Time: metav1.NewTime(now)}
	if failed != nil {
		rb.Remote = failed.name
	}
	m.Status.Rollout.RolledBack = rb
	m.Status.Rollout.Admitted, m.Status.Rollout.Holding = nil, ""
	said.Eventf(m, nil, corev1.EventTypeWarning, fleeetv1.ReasonRolledBack, "Rollback",
		"%s rolled back to %s: %s", m.Status.Version, to.Version, why)
	return true
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

// recordHistory adds the current revision to status.history once it is
// Ready across the fleet, or once it is rolled back, newest first, keeping
// spec.rollout.historyLimit records and always the newest Succeeded one (a
// rollback may be returning to it).
func (r *Reconciler) recordHistory(m *fleeetv1.Module, revision string, p decision, now time.Time) {
	outcome := fleeetv1.RolloutSucceeded
	switch ro := m.Status.Rollout; {
	case ro != nil && ro.RolledBack != nil:
		outcome = fleeetv1.RolloutRolledBack
	case p.waiting > 0 || len(p.failed) > 0 || p.summary.Ready == 0 || m.Spec.Suspend:
		return
	}
	h := m.Status.History
	if len(h) > 0 && h[0].Revision == revision && h[0].Outcome == outcome {
		return
	}
	h = slices.DeleteFunc(h, func(rec fleeetv1.RolloutRecord) bool { return rec.Revision == revision })
	record := fleeetv1.RolloutRecord{Revision: revision, Version: m.Status.Version, Outcome: outcome, Time: metav1.NewTime(now),
		Sync: *m.Spec.Sync.DeepCopy()}
	for _, b := range m.Spec.ControlPlaneBindings {
		record.ControlPlaneBindings = append(record.ControlPlaneBindings, *b.DeepCopy())
	}
	for _, o := range m.Spec.Overrides {
		record.Overrides = append(record.Overrides, *o.DeepCopy())
	}
	h = append([]fleeetv1.RolloutRecord{record}, h...)
	limit := int(m.Spec.Rollout.HistoryLimit)
	if limit < 1 {
		limit = 5
	}
	if len(h) > limit {
		kept := h[:limit]
		if !slices.ContainsFunc(kept, succeeded) {
			if i := slices.IndexFunc(h, succeeded); i >= 0 {
				kept[limit-1] = h[i]
			}
		}
		h = kept
	}
	m.Status.History = h
}

func succeeded(rec fleeetv1.RolloutRecord) bool { return rec.Outcome == fleeetv1.RolloutSucceeded }

// reconcileStatus sets the summary and conditions: Ready once every online
// selected Remote runs the current version Ready; RolloutPaused while a
// failure holds a rolling update (reason RemoteFailed), or a person paused
// it (PausedBySpec, PausedByAnnotation); RolledBack, and Stalled, once the
// revision was rolled back.
func (r *Reconciler) reconcileStatus(m *fleeetv1.Module, p decision, notes compileNotes) {
	m.Status.Summary = p.summary
	s := p.summary
	progress := fmt.Sprintf("%d of %d Remotes ready at %s (%d updated, %d offline)", s.Ready, s.Total, m.Status.Version, s.Updated, s.Offline)
	if s.Suspended > 0 {
		progress = strings.TrimSuffix(progress, ")") + fmt.Sprintf(", %d suspended)", s.Suspended)
	}
	if t := p.podsNotReady; t != nil {
		progress += fmt.Sprintf("; pods not ready on %d: Remote %s reports %s", s.PodsNotReady, t.name, t.health.Summary())
	}
	ro := m.Status.Rollout
	if ro != nil && ro.Holding != "" {
		progress += "; " + ro.Holding
	}

	if ro != nil && ro.RolledBack != nil {
		rb := ro.RolledBack
		msg := fmt.Sprintf("%s rolled back to %s (%d of %d Remotes back and ready): %s; change the Module's sync to go on",
			m.Status.Version, rb.Version, s.Ready, s.Total, rb.Message)
		apimeta.RemoveStatusCondition(&m.Status.Conditions, fleeetv1.RolloutPausedCondition)
		status.SetCondition(&m.Status.Conditions, m.Generation, fleeetv1.RolledBackCondition, metav1.ConditionTrue, fleeetv1.ReasonRolledBack, msg)
		status.MarkStalled(m, fleeetv1.ReasonRolledBack, msg)
		return
	}
	apimeta.RemoveStatusCondition(&m.Status.Conditions, fleeetv1.RolledBackCondition)
	if ro != nil && ro.PausedBy != "" {
		msg := fmt.Sprintf("Remote %s failed on %s", ro.PausedBy, m.Status.Version)
		reason := fleeetv1.ReasonRemoteFailed
		if i := slices.IndexFunc(p.failed, func(t *target) bool { return t.name == ro.PausedBy }); i >= 0 {
			msg += ": " + p.failed[i].reason()
		}
		msg += "; repair it (then fleetctl retry " + ro.PausedBy + " if Flux gave up) or change the Module's spec to resume"
		if m.Spec.Rollout.OnFailure == fleeetv1.RollbackOnFailure {
			reason = fleeetv1.ReasonNothingToRollBackTo
			msg += "; no earlier version was Ready across the fleet to roll back to"
		}
		status.SetCondition(&m.Status.Conditions, m.Generation, fleeetv1.RolloutPausedCondition, metav1.ConditionTrue, reason, msg)
		status.MarkFailed(m, reason, msg)
		return
	}
	if p.checkFailed != "" {
		msg := p.checkFailed + "; the rollout holds until the check holds for its duration or the Module's spec changes"
		if m.Spec.Rollout.OnFailure == fleeetv1.RollbackOnFailure {
			msg += "; no earlier version was Ready across the fleet to roll back to"
		}
		status.SetCondition(&m.Status.Conditions, m.Generation, fleeetv1.RolloutPausedCondition, metav1.ConditionTrue, fleeetv1.ReasonCheckFailed, msg)
		status.MarkFailed(m, fleeetv1.ReasonCheckFailed, msg)
		return
	}
	if reason, msg := pausedBy(m); reason != "" {
		status.SetCondition(&m.Status.Conditions, m.Generation, fleeetv1.RolloutPausedCondition, metav1.ConditionTrue, reason, msg)
	} else {
		apimeta.RemoveStatusCondition(&m.Status.Conditions, fleeetv1.RolloutPausedCondition)
	}
	switch {
	case m.Spec.Suspend:
		status.MarkFailed(m, fleeetv1.ReasonSuspended, "suspended; "+progress)
	case ro != nil && len(p.shut) > 0 && p.waiting > 0:
		status.MarkStalled(m, fleeetv1.ReasonWindowNeverOpens, progress+"; change spec.rollout.windows to go on")
	case len(notes.bindingErrs) > 0:
		status.MarkFailed(m, fleeetv1.ReasonBindingFailed, firstFew(notes.bindingErrs))
	case len(notes.unplaced) > 0:
		status.MarkFailed(m, fleeetv1.ReasonDependencyNotPlaced, firstFew(notes.unplaced))
	case len(notes.undeliverable) > 0:
		status.MarkFailed(m, fleeetv1.ReasonSecretNotDeliverable, "spec.sync.secrets: "+strings.Join(notes.undeliverable, "; ")+
			"; the syncs naming them wait on every cluster until they are delivered")
	case len(notes.tooLarge) > 0:
		status.MarkFailed(m, fleeetv1.ReasonPlanTooLarge, fmt.Sprintf(
			"left out of the plans of %d Remotes, which would pass --max-plan-bytes or the syncs a cluster holds with it; they keep what they held of it and the other Modules' changes go on: %s",
			len(notes.tooLarge), firstFew(notes.tooLarge)))
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

// changedReports lists the syncs whose report differs between before and
// after, or is in only one of them.
func changedReports(before, after []fleeetv1.SyncStatus) []string {
	var names []string
	for i := range after {
		j := slices.IndexFunc(before, func(s fleeetv1.SyncStatus) bool { return s.Name == after[i].Name })
		if j < 0 || !equality.Semantic.DeepEqual(before[j], after[i]) {
			names = append(names, after[i].Name)
		}
	}
	for i := range before {
		if !slices.ContainsFunc(after, func(s fleeetv1.SyncStatus) bool { return s.Name == before[i].Name }) {
			names = append(names, before[i].Name)
		}
	}
	return names
}
