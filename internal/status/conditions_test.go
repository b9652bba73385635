package status_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/status"
)

// Each helper leaves the kstatus trio in one of the four states, whatever
// the object held before, about the object's current generation.
func TestMarkLeavesTheKstatusTrioInOneState(t *testing.T) {
	type trio struct{ ready, reconciling, stalled metav1.ConditionStatus } // "" = absent
	for name, tc := range map[string]struct {
		mark func(status.Conditioned, string, string)
		want trio
	}{
		"ready":       {status.MarkReady, trio{ready: metav1.ConditionTrue}},
		"progressing": {status.MarkProgressing, trio{ready: metav1.ConditionFalse, reconciling: metav1.ConditionTrue}},
		"failed":      {status.MarkFailed, trio{ready: metav1.ConditionFalse}},
		"stalled":     {status.MarkStalled, trio{ready: metav1.ConditionFalse, stalled: metav1.ConditionTrue}},
	} {
		for _, before := range [][]metav1.Condition{
			nil,
			{
				{Type: fleeetv1.ReadyCondition, Status: metav1.ConditionUnknown, Reason: "Old", ObservedGeneration: 1},
				{Type: fleeetv1.ReconcilingCondition, Status: metav1.ConditionTrue, Reason: "Old", ObservedGeneration: 1},
				{Type: fleeetv1.StalledCondition, Status: metav1.ConditionTrue, Reason: "Old", ObservedGeneration: 1},
				{Type: fleeetv1.RolloutPausedCondition, Status: metav1.ConditionTrue, Reason: "Old", ObservedGeneration: 1},
			},
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Generation: 4}}
				m.Status.Conditions = before
				tc.mark(m, "Why", "because")
				got := trio{}
				for _, c := range m.Status.Conditions {
					if c.Type == fleeetv1.RolloutPausedCondition {
						g.Expect(c.Reason).To(Equal("Old"), "other conditions are left alone")
						continue
					}
					g.Expect(c.Reason).To(Equal("Why"), c.Type)
					g.Expect(c.Message).To(Equal("because"), c.Type)
					g.Expect(c.ObservedGeneration).To(BeEquivalentTo(4), c.Type)
					switch c.Type {
					case fleeetv1.ReadyCondition:
						got.ready = c.Status
					case fleeetv1.ReconcilingCondition:
						got.reconciling = c.Status
					case fleeetv1.StalledCondition:
						got.stalled = c.Status
					}
				}
				g.Expect(got).To(Equal(tc.want))
			})
		}
	}
}
