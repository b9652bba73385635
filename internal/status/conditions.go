package status

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Conditioned is an object with kstatus conditions about its generation.
type Conditioned interface {
	GetGeneration() int64
	GetConditions() []metav1.Condition
	SetConditions([]metav1.Condition)
}

// MarkReady says the object reached its desired state: Ready=True, neither
// Reconciling nor Stalled.
func MarkReady(obj Conditioned, reason, msg string) {
	mark(obj, reason, msg, metav1.ConditionTrue, nil, fleeetv1.ReconcilingCondition, fleeetv1.StalledCondition)
}

// MarkProgressing says the object is on its way: Ready=False and
// Reconciling=True with the same reason and message, not Stalled.
func MarkProgressing(obj Conditioned, reason, msg string) {
	mark(obj, reason, msg, metav1.ConditionFalse, []string{fleeetv1.ReconcilingCondition}, fleeetv1.StalledCondition)
}

// MarkFailed says the object is not ready and nothing is under way to make
// it so, but it recovers by itself once the cause is mended (a failed
// Remote, a binding's missing object): Ready=False, neither Reconciling nor
// Stalled.
func MarkFailed(obj Conditioned, reason, msg string) {
	mark(obj, reason, msg, metav1.ConditionFalse, nil, fleeetv1.ReconcilingCondition, fleeetv1.StalledCondition)
}

// MarkStalled says the object cannot make progress until its spec changes:
// Stalled=True and Ready=False with the same reason and message, not
// Reconciling.
func MarkStalled(obj Conditioned, reason, msg string) {
	mark(obj, reason, msg, metav1.ConditionFalse, []string{fleeetv1.StalledCondition}, fleeetv1.ReconcilingCondition)
}

// mark sets Ready to ready, sets each of trueTypes True, and removes each of
// absent, all about the object's current generation.
func mark(obj Conditioned, reason, msg string, ready metav1.ConditionStatus, trueTypes []string, absent ...string) {
	conds := obj.GetConditions()
	SetCondition(&conds, obj.GetGeneration(), fleeetv1.ReadyCondition, ready, reason, msg)
	for _, typ := range trueTypes {
		SetCondition(&conds, obj.GetGeneration(), typ, metav1.ConditionTrue, reason, msg)
	}
	for _, typ := range absent {
		apimeta.RemoveStatusCondition(&conds, typ)
	}
	obj.SetConditions(conds)
}

// PausedByHand returns the message of a Module's RolloutPaused condition,
// and true, when a person paused its rollout (spec.rollout.paused or the
// fleeet.dev/pause annotation) rather than a failing Remote: such a pause is
// no failure to alert on.
func PausedByHand(conds []metav1.Condition) (string, bool) {
	c := apimeta.FindStatusCondition(conds, fleeetv1.RolloutPausedCondition)
	if c == nil || c.Status != metav1.ConditionTrue ||
		(c.Reason != fleeetv1.ReasonPausedBySpec && c.Reason != fleeetv1.ReasonPausedByAnnotation) {
		return "", false
	}
	return c.Message, true
}
