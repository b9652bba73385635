// Package status holds what every fleeet controller does with its object's
// status: set kstatus conditions and write the outcome of a reconcile back,
// once, on every exit path.
package status

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// SetCondition records a condition about the given generation of an object,
// keeping its transition time when the status does not change.
func SetCondition(conds *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(conds, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: generation,
	})
}

// Object is a kind whose whole status one reconciler writes.
type Object interface {
	client.Object
	Conditioned
	// SetObservedGeneration records the generation the status is about.
	SetObservedGeneration(int64)
	// GetStatus returns a pointer to the status, to tell whether it changed.
	GetStatus() any
}

// RecordFailure records the error a reconcile of obj returned, if any, as a
// Warning ReconcileFailed event, so every failure shows in `kubectl
// describe` and `kubectl events`. A conflict is not a failure: the
// reconcile runs again on the newer object.
func RecordFailure(recorder events.EventRecorder, obj runtime.Object, err error) {
	if err != nil && !apierrors.IsConflict(err) {
		recorder.Eventf(obj, nil, corev1.EventTypeWarning, fleeetv1.ReasonReconcileFailed, "Reconcile", "%v", err)
	}
}

// Patcher writes the outcome of one reconcile into its object's status.
// Reconcile creates it right after reading the object and defers Finish, so
// every exit path records what happened, and nothing else writes the status.
type Patcher struct {
	client   client.Client
	recorder events.EventRecorder
	obj      Object
	before   Object
	// said are the events about what the status records, recorded once
	// it is written (Eventf).
	said []func()
}

// Eventf records an event about a change the status being written records
// (a rollout admitting a Remote, a stage starting, a rollback), once Finish
// has written it: a write that conflicts, because the reconcile read an
// object older than the API server's and decided the same change again,
// records nothing, and the event is not said twice for one change. regarding
// and related are as events.EventRecorder's.
func (p *Patcher) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	p.said = append(p.said, func() { p.recorder.Eventf(regarding, related, eventtype, reason, action, note, args...) })
}

// NewPatcher remembers obj's status as read.
func NewPatcher(c client.Client, recorder events.EventRecorder, obj Object) *Patcher {
	return &Patcher{client: c, recorder: recorder, obj: obj, before: obj.DeepCopyObject().(Object)}
}

// Finish finalises the status of the reconcile that ended with *reconcileErr:
//   - observedGeneration is set when the outcome for this generation is
//     known: the reconcile returned no error (it succeeded, waits, or is
//     Stalled), or it failed after setting Ready about this generation (a
//     Module whose Remotes partly failed). An error before that leaves the
//     status saying what the previous generation reached, as Flux's
//     controllers do.
//   - a failure is a Warning event (RecordFailure).
//   - the status is written whole, only if it changed, over the version
//     read: a concurrent writer makes it a conflict, never a lost write. (A
//     merge patch would send only the changed fields, but a status the API
//     server has never seen whole would then lack its required ones.) An
//     object deleted meanwhile is not an error.
//
// An error writing the status joins *reconcileErr.
func (p *Patcher) Finish(ctx context.Context, reconcileErr *error) {
	err := *reconcileErr
	ready := apimeta.FindStatusCondition(p.obj.GetConditions(), fleeetv1.ReadyCondition)
	if err == nil || ready != nil && ready.ObservedGeneration == p.obj.GetGeneration() {
		p.obj.SetObservedGeneration(p.obj.GetGeneration())
	}
	RecordFailure(p.recorder, p.obj, err)
	if !equality.Semantic.DeepEqual(p.before.GetStatus(), p.obj.GetStatus()) {
		if err := p.client.Status().Update(ctx, p.obj); client.IgnoreNotFound(err) != nil {
			*reconcileErr = errors.Join(*reconcileErr, fmt.Errorf("writing status: %w", err))
			return
		}
	}
	for _, say := range p.said {
		say()
	}
}
