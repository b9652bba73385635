package module

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// A status that moved only in its counts waits for progressEvery after the
// Module's last write; any other change, the first write and a new
// generation's are written at once.
func TestProgressHoldsOnlyCountsWithinItsInterval(t *testing.T) {
	g := NewWithT(t)
	key := types.NamespacedName{Namespace: "tenant", Name: "app"}
	at := func(ready int32, status metav1.ConditionStatus, reason string) *fleeetv1.ModuleStatus {
		return &fleeetv1.ModuleStatus{ObservedGeneration: 3, Summary: fleeetv1.ModuleSummary{Total: 10, Ready: ready},
			Conditions: []metav1.Condition{{Type: fleeetv1.ReadyCondition, Status: status, Reason: reason,
				Message: time.Duration(ready).String()}}}
	}
	t0 := time.Unix(1_000_000, 0)
	var p progress

	g.Expect(p.hold(key, 3, at(1, metav1.ConditionFalse, "Progressing"), at(2, metav1.ConditionFalse, "Progressing"), t0)).
		To(BeZero(), "the first write since the manager started")
	g.Expect(p.hold(key, 3, at(2, metav1.ConditionFalse, "Progressing"), at(2, metav1.ConditionFalse, "Progressing"), t0.Add(200*time.Millisecond))).
		To(BeZero(), "nothing to write")
	g.Expect(p.hold(key, 3, at(2, metav1.ConditionFalse, "Progressing"), at(5, metav1.ConditionFalse, "Progressing"), t0.Add(500*time.Millisecond))).
		To(Equal(progressEvery-500*time.Millisecond), "counts and a message alone wait")
	g.Expect(p.hold(key, 3, at(2, metav1.ConditionFalse, "Progressing"), at(10, metav1.ConditionTrue, "Succeeded"), t0.Add(time.Second))).
		To(BeZero(), "a condition's status changed")
	g.Expect(p.hold(key, 3, at(10, metav1.ConditionTrue, "Succeeded"), at(9, metav1.ConditionTrue, "Succeeded"), t0.Add(2*time.Second))).
		To(Equal(progressEvery-time.Second), "the interval runs from the last write")
	g.Expect(p.hold(key, 4, at(10, metav1.ConditionTrue, "Succeeded"), at(9, metav1.ConditionTrue, "Succeeded"), t0.Add(2*time.Second))).
		To(BeZero(), "a new generation's status")
	g.Expect(p.hold(key, 3, at(9, metav1.ConditionTrue, "Succeeded"), at(8, metav1.ConditionTrue, "Succeeded"), t0.Add(2*time.Second+progressEvery))).
		To(BeZero(), "once progressEvery has passed")

	withRollout := at(8, metav1.ConditionTrue, "Succeeded")
	withRollout.Rollout = &fleeetv1.RolloutStatus{Revision: "r2"}
	g.Expect(p.hold(key, 3, at(8, metav1.ConditionTrue, "Succeeded"), withRollout, t0.Add(2*time.Second+progressEvery))).
		To(BeZero(), "the rollout's admissions are written at once")

	p.forget(key)
	g.Expect(p.hold(key, 3, at(1, metav1.ConditionFalse, "Progressing"), at(2, metav1.ConditionFalse, "Progressing"), t0.Add(2*time.Second+progressEvery))).
		To(BeZero(), "a Module forgotten, deleted and made again, starts afresh")
}
