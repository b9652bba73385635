package module_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// A stage's check, asked of a server speaking Prometheus' query API: the
// canary stage counts as done only once its query held for 8 s, and then
// the rest moves; a version whose check does not hold within its timeout
// is rolled back by the manager, and the rest never holds it.
func TestAStageCheckHoldsTheNextStageAndRollsBackWhatItFails(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	online := []string{"canary-1", "rest-1"}
	fleettest.NewRemote(t, cluster.Client, ns, "canary-1", map[string]string{"stage": "canary"}, true)
	fleettest.NewRemote(t, cluster.Client, ns, "rest-1", nil, true)
	query := fmt.Sprintf(`up{namespace=%q,cluster=~"$(REMOTES)"} == 1`, ns)
	asked := fmt.Sprintf(`up{namespace=%q,cluster=~"canary-1"} == 1`, ns)
	prometheus.Set(asked, true)

	m := fleettest.NewModule("v1", &metav1.LabelSelector{})
	m.Namespace = ns
	m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, OnFailure: fleeetv1.RollbackOnFailure,
		Stages: []fleeetv1.RolloutStage{{Name: "canary", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"stage": "canary"}},
			Check: &fleeetv1.StageCheck{Query: query, For: metav1.Duration{Duration: 8 * time.Second}, Timeout: metav1.Duration{Duration: 10 * time.Second}}}}}
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	ready := func(string, string) fleeetv1.SyncState { return fleeetv1.SyncReady }
	held := func(g Gomega) map[string]string { return heldTags(g, ns, online) }

	// v1 goes everywhere at once: a Remote holding nothing has nothing to
	// lose. v2: the canary moves, its check holds, and after 8 s the rest
	// moves.
	driveUntil(g, ns, online, ready, func(g Gomega) {
		g.Expect(held(g)).To(Equal(map[string]string{"canary-1": "v1", "rest-1": "v1"}))
	})
	patchModule(g, ns, `{"spec":{"sync":{"source":{"git":{"tag":"v2"}}}}}`)
	driveUntil(g, ns, online, ready, func(g Gomega) {
		g.Expect(held(g)).To(Equal(map[string]string{"canary-1": "v2", "rest-1": "v1"}))
		ro := fleettest.ModuleStatus(g, cluster.Client, ns).Status.Rollout
		g.Expect(ro.Holding).To(HavePrefix("stage canary's check holds since "))
		g.Expect(ro.Checks).To(HaveLen(1))
		g.Expect(ro.Checks[0].Answered).To(BeTrue())
	})
	driveUntil(g, ns, online, ready, func(g Gomega) {
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
		g.Expect(held(g)).To(Equal(map[string]string{"canary-1": "v2", "rest-1": "v2"}))
		g.Expect(m.Status.Rollout.Checked).To(Equal([]string{"canary"}))
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue())
		g.Expect(m.Status.History).NotTo(BeEmpty())
		g.Expect(m.Status.History[0].Version).To(Equal("v2"))
	})
	g.Expect(prometheus.Asked(asked)).To(BeNumerically(">=", 3), "it held from the first answer to one 8 s later, asked every 5 s")
	history := watchHeld(t, ns)

	// v3: the check stops holding; 10 s after the canary is done, v3 is
	// rolled back.
	prometheus.Set(asked, false)
	patchModule(g, ns, `{"spec":{"sync":{"source":{"git":{"tag":"v3"}}}}}`)
	driveUntil(g, ns, online, ready, func(g Gomega) {
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
		rolledBack := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolledBackCondition)
		g.Expect(rolledBack).NotTo(BeNil())
		g.Expect(rolledBack.Message).To(ContainSubstring(
			"v3 rolled back to v2 (2 of 2 Remotes back and ready): stage canary's check did not hold for 8s within 10s of the stage being done: the query returned no sample"))
		g.Expect(held(g)).To(Equal(map[string]string{"canary-1": "v2", "rest-1": "v2"}))
	})
	g.Expect(history.of("canary-1")).To(Equal([]string{"v2", "v3", "v2"}))
	g.Expect(history.of("rest-1")).To(Equal([]string{"v2"}), "the rest never held v3")
}
