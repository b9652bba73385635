// Package versions runs Modules' version policies: it reads the versions a
// Module's source offers, picks the one its policy allows and writes it into
// the sync as an exact version, which then rolls out as any change does.
package versions

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/versions"
)

// lookTimeout bounds one read of a source's versions.
const lookTimeout = 30 * time.Second

// Reconciler resolves the version policies of Modules.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// HTTP reads sources; its dialer refuses the networks sources may not
	// name (--source-networks-deny).
	HTTP       *http.Client
	Concurrent int
	// Every, when set, replaces each policy's interval between looks
	// (tests, which cannot wait the minute the API allows at least).
	Every time.Duration

	mu    sync.Mutex
	looks map[types.UID]look
}

// look is what one read of a Module's source found, kept so that reconciles
// between two looks (the Module's own writes wake it) read nothing.
type look struct {
	at time.Time
	// source names the source looked at (sourceURL), which the versions
	// this controller writes leave as it is.
	source string
	// requested is the Module's RequestedAtAnnotation when it was looked at.
	requested string
	offered   []string
	err       error
}

// RequestedAtAnnotation on a Module asks for a look at its source now, as
// on Flux's objects (`flux reconcile`, a notification Receiver): each new
// value brings one look.
const RequestedAtAnnotation = "reconcile.fluxcd.io/requestedAt"

// SetupWithManager watches Modules: a new generation (a policy set or
// changed, the version written by hand or by this controller), a look
// requested and each interval bring one back.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("versions").
		For(&fleeetv1.Module{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Concurrent)}).
		Complete(r)
}

// Reconcile looks at a Module's source once per interval and writes the
// version its policy picks into the sync when it is newer than the sync's,
// or the sync's no longer satisfies the policy. A version whose rollout was
// rolled back is not picked again; the source unreadable, or offering
// nothing the policy allows, changes nothing and says so.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &fleeetv1.Module{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	p := m.Spec.VersionPolicy
	if p == nil || !m.DeletionTimestamp.IsZero() {
		r.forget(m.UID)
		if m.Status.VersionPolicy != nil || apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.VersionResolvedCondition) != nil {
			return ctrl.Result{}, status.Apply(ctx, r.Client, m, status.VersionsManager, map[string]any{})
		}
		return ctrl.Result{}, nil
	}
	if m.Spec.Suspend {
		return ctrl.Result{}, nil
	}
	st := m.Status.VersionPolicy.DeepCopy()
	if st == nil {
		st = &fleeetv1.VersionPolicyStatus{}
	}
	if problems := versions.Check(p, m.Spec.Sync.Source); len(problems) > 0 {
		return settled(ctrl.Result{}, r.report(ctx, m, st, metav1.ConditionFalse, fleeetv1.ReasonInvalidVersionPolicy, strings.Join(problems, "; ")))
	}
	l, wait := r.look(ctx, m)
	requeue := ctrl.Result{RequeueAfter: wait}
	ch := choose(p, sourceURL(m.Spec.Sync.Source))
	if l.err != nil {
		return settled(requeue, r.report(ctx, m, st, metav1.ConditionFalse, fleeetv1.ReasonSourceUnreadable,
			fmt.Sprintf("reading the versions of %s: %v; the sync keeps %s", ch.where, l.err, versions.Current(m.Spec.Sync.Source))))
	}
	st.Skipped = skipped(st.Skipped, m.Status.History)
	st.Available, _ = ch.pick(l.offered, nil)
	pick, ok := ch.pick(l.offered, st.Skipped)
	current := versions.Current(m.Spec.Sync.Source)
	if !ok {
		return settled(requeue, r.report(ctx, m, st, metav1.ConditionFalse, fleeetv1.ReasonNoVersionInRange,
			fmt.Sprintf("%s offers no %s%s; the sync keeps %s", ch.where, ch.rule, skipping(st.Skipped), current)))
	}
	if ch.moves(current, pick, st.Skipped) {
		if err := r.write(ctx, m, pick); err != nil {
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				return settled(requeue, r.report(ctx, m, st, metav1.ConditionFalse, fleeetv1.ReasonPolicyDenied,
					fmt.Sprintf("writing %s into the sync was refused: %v", pick, err)))
			}
			return settled(ctrl.Result{}, err)
		}
		now := metav1.Now()
		st.Picked, st.PickedAt = pick, &now
		r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, fleeetv1.ReasonVersionPicked, "PickVersion",
			"Picked %s, %s%s (was %s)", pick, ch.best, skipping(st.Skipped), current)
		current = pick
	}
	msg := fmt.Sprintf("the sync holds %s", current)
	switch {
	case current == pick:
		msg += fmt.Sprintf(", %s%s", ch.best, skipping(st.Skipped))
	case slices.Contains(st.Skipped, current):
		msg += fmt.Sprintf(", which was rolled back; %s, %s, is older, and a newer one is picked once offered", pick, ch.best)
	default:
		msg += fmt.Sprintf(", which %s does not offer; %s is %s", ch.where, ch.best, pick)
	}
	return settled(requeue, r.report(ctx, m, st, metav1.ConditionTrue, fleeetv1.ReasonVersionPicked, msg))
}

// choice is how a version policy chooses among what its source offers,
// and the words its messages use.
type choice struct {
	// constraint is a semver policy's; nil for a digest-follow.
	constraint *semver.Constraints
	// where names the source, rule what the policy asks of a version, best
	// what it picks.
	where, rule, best string
}

// choose is p's choice among what the source where offers; p passed
// versions.Check.
func choose(p *fleeetv1.VersionPolicy, where string) choice {
	if p.DigestOf != "" {
		return choice{where: where, rule: fmt.Sprintf("digest under tag %q", p.DigestOf),
			best: fmt.Sprintf("the digest tag %q of %s names", p.DigestOf, where)}
	}
	c, _ := versions.Constraint(p)
	return choice{constraint: c, where: where, rule: fmt.Sprintf("version satisfying %q", p.Semver),
		best: fmt.Sprintf("the highest version of %s satisfying %q", where, p.Semver)}
}

// pick returns the version the policy picks among offered, leaving out
// skip, and whether there is one: the highest satisfying the constraint,
// or the one digest the tag names.
func (c choice) pick(offered, skip []string) (string, bool) {
	if c.constraint != nil {
		return versions.Pick(offered, c.constraint, skip)
	}
	if len(offered) != 1 || slices.Contains(skip, offered[0]) {
		return "", false
	}
	return offered[0], true
}

// moves says whether the sync's version current gives way to pick: for a
// digest-follow whenever they differ (a digest has no order); for a
// semver policy when pick is newer, or current no longer satisfies the
// policy (and was not rolled back, which the rollout already holds the
// Remotes back from).
func (c choice) moves(current, pick string, rolledBack []string) bool {
	if current == pick {
		return false
	}
	if c.constraint == nil {
		return true
	}
	cur, err := semver.NewVersion(current)
	if err != nil {
		return true
	}
	next, _ := semver.NewVersion(pick)
	return next.GreaterThan(cur) || !c.constraint.Check(cur) && !slices.Contains(rolledBack, current)
}

// look returns the last look at m's source, reading it again when there
// is none for this source, the policy's interval has passed or a look was
// requested since, and how long until the next one is due.
func (r *Reconciler) look(ctx context.Context, m *fleeetv1.Module) (look, time.Duration) {
	interval := r.Every
	if p := m.Spec.VersionPolicy; interval == 0 && p.Interval != nil {
		interval = p.Interval.Duration
	}
	interval = cmp.Or(interval, 5*time.Minute)
	// A look is of a source under a policy's way of reading it: a tag
	// followed, or the list of versions.
	src, requested := sourceURL(m.Spec.Sync.Source)+" "+m.Spec.VersionPolicy.DigestOf, m.Annotations[RequestedAtAnnotation]
	r.mu.Lock()
	l, ok := r.looks[m.UID]
	r.mu.Unlock()
	if ok && l.source == src && l.requested == requested {
		if due := time.Until(l.at.Add(interval)); due > 0 {
			return l, due
		}
	}
	ctx, cancel := context.WithTimeout(ctx, lookTimeout)
	defer cancel()
	offered, err := versions.Offered(ctx, r.HTTP, m.Spec.VersionPolicy, m.Spec.Sync.Source)
	l = look{at: time.Now(), source: src, requested: requested, offered: offered, err: err}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.looks == nil {
		r.looks = map[types.UID]look{}
	}
	r.looks[m.UID] = l
	return l, interval
}

func (r *Reconciler) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.looks, uid)
}

// write sets the sync's version to v, over the Module as read.
func (r *Reconciler) write(ctx context.Context, m *fleeetv1.Module, v string) error {
	base := m.DeepCopy()
	versions.Set(&m.Spec.Sync.Source, v)
	return r.Client.Patch(ctx, m, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(status.VersionsManager))
}

// report applies the VersionResolved condition and st, when they changed.
func (r *Reconciler) report(ctx context.Context, m *fleeetv1.Module, st *fleeetv1.VersionPolicyStatus, cond metav1.ConditionStatus, reason, msg string) error {
	conds := slices.Clone(m.Status.Conditions)
	status.SetCondition(&conds, m.Generation, fleeetv1.VersionResolvedCondition, cond, reason, msg)
	was := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.VersionResolvedCondition)
	now := apimeta.FindStatusCondition(conds, fleeetv1.VersionResolvedCondition)
	if was != nil && equality.Semantic.DeepEqual(was, now) && equalStatus(m.Status.VersionPolicy, st) {
		return nil
	}
	if cond == metav1.ConditionFalse && (was == nil || was.Message != msg) {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, reason, "PickVersion", "%s", msg)
	}
	// Over the version read: what a stale read of the Module worked out
	// must not replace what a write of the version recorded.
	err := status.ApplyOver(ctx, r.Client, m, status.VersionsManager, map[string]any{
		"versionPolicy": st,
		"conditions":    status.Conditions(conds, fleeetv1.VersionResolvedCondition),
	})
	return err
}

// settled is a reconcile's result: a conflict (the Module changed since it
// was read) brings it back soon, with fresher state, and is no failure.
func settled(res ctrl.Result, err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return res, err
}

func equalStatus(a, b *fleeetv1.VersionPolicyStatus) bool {
	if a == nil {
		a = &fleeetv1.VersionPolicyStatus{}
	}
	return a.Available == b.Available && a.Picked == b.Picked && slices.Equal(a.Skipped, b.Skipped) &&
		(a.PickedAt == nil) == (b.PickedAt == nil) && (a.PickedAt == nil || a.PickedAt.Equal(b.PickedAt))
}

// skipped merges the versions already skipped with those the history
// records as rolled back, newest first, at most 10: the history keeps ten
// records, and a version rolled back long ago is still not picked again.
func skipped(was []string, history []fleeetv1.RolloutRecord) []string {
	out := versions.RolledBack(history, 10)
	for _, v := range was {
		if !slices.Contains(out, v) && len(out) < 10 {
			out = append(out, v)
		}
	}
	return out
}

func skipping(skipped []string) string {
	if len(skipped) == 0 {
		return ""
	}
	return ", skipping " + strings.Join(skipped, ", ") + " (rolled back)"
}

// sourceURL names the source a policy reads in messages and looks: a git
// repository's URL, a Helm repository's with the chart, an OCI
// repository's.
func sourceURL(src fleeetv1.Source) string {
	switch {
	case src.Git != nil:
		return src.Git.URL
	case src.Helm != nil:
		return src.Helm.URL + " (chart " + src.Helm.Chart + ")"
	case src.OCI != nil:
		return src.OCI.URL
	}
	return "the source"
}
