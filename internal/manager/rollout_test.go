package manager_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// heldHistory records, from a watch over every plan of a namespace, the
// sequence of versions each Remote held.
type heldHistory struct {
	mu   sync.Mutex
	tags map[string][]string
}

func watchHeld(t *testing.T, ns string) *heldHistory {
	h := &heldHistory{tags: map[string][]string{}}
	onPlans(t, ns, func(pa *fleeetv1.ProxyAssemblage) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if seq, tag := h.tags[pa.Name], heldTag(pa); len(seq) == 0 || seq[len(seq)-1] != tag {
			h.tags[pa.Name] = append(seq, tag)
		}
	})
	return h
}

// of returns the versions a Remote held, in order.
func (h *heldHistory) of(remote string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.tags[remote])
}

// A three-stage rollout: the canary stage waits for its approval, the
// prod stage moves all at once, the rest last. A version that fails on the
// canary is rolled back by the manager without anyone's help, and no
// later-stage Remote ever holds it; fleetctl rollout undo's annotation rolls
// a healthy version back on demand.
func TestAStagedRolloutWaitsForApprovalAndRollsBackByItself(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	stages := map[string]string{"canary-1": "canary", "prod-1": "prod", "prod-2": "prod", "rest-1": ""}
	online := []string{"canary-1", "prod-1", "prod-2", "rest-1"}
	for _, name := range online {
		newRemote(t, ns, name, map[string]string{"stage": stages[name]}, true)
	}
	m := newModule("v1", &metav1.LabelSelector{})
	m.Namespace = ns
	m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, OnFailure: fleeetv1.RollbackOnFailure,
		Stages: []fleeetv1.RolloutStage{
			{Name: "canary", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"stage": "canary"}}, Approval: fleeetv1.ManualApproval},
			{Name: "prod", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"stage": "prod"}}, MaxUnavailable: ptr.To(intstr.FromString("100%"))},
		}}
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())

	fails := map[string]bool{"v3": true}
	decide := func(remote, tag string) fleeetv1.SyncState {
		if remote == "canary-1" && fails[tag] {
			return fleeetv1.SyncFailed
		}
		return fleeetv1.SyncReady
	}
	converged := func(tag string) func(Gomega) {
		return func(g Gomega) {
			m := moduleStatus(g, ns)
			g.Expect(m.Status.Version).To(Equal(tag))
			g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue())
			g.Expect(m.Status.History).NotTo(BeEmpty())
			g.Expect(m.Status.History[0].Version).To(Equal(tag))
			g.Expect(m.Status.History[0].Outcome).To(Equal(fleeetv1.RolloutSucceeded))
		}
	}
	setTag := func(tag string) {
		patchModule(g, ns, fmt.Sprintf(`{"spec":{"sync":{"source":{"git":{"tag":%q}}}}}`, tag))
	}
	held := func(g Gomega) map[string]string {
		tags := map[string]string{}
		for _, name := range online {
			tags[name] = heldTag(proxy(g, ns, name))
		}
		return tags
	}
	driveUntil(g, ns, online, decide, converged("v1"))
	history := watchHeld(t, ns)

	// v2: the canary moves, then the rollout waits for its approval.
	setTag("v2")
	driveUntil(g, ns, online, decide, func(g Gomega) {
		g.Expect(held(g)).To(Equal(map[string]string{"canary-1": "v2", "prod-1": "v1", "prod-2": "v1", "rest-1": "v1"}))
		ro := moduleStatus(g, ns).Status.Rollout
		g.Expect(ro.Holding).To(Equal("stage canary awaits approval (fleetctl rollout approve)"))
	})
	g.Consistently(held, "2s", poll).Should(HaveKeyWithValue("prod-1", "v1"), "no approval, no prod")
	approve(g, ns, "canary")
	driveUntil(g, ns, online, decide, converged("v2"))
	g.Expect(history.of("prod-1")).To(Equal([]string{"v1", "v2"}))
	g.Expect(history.of("rest-1")).To(Equal([]string{"v1", "v2"}))

	// v3 fails on the canary: the manager rolls it back to v2 by itself.
	setTag("v3")
	driveUntil(g, ns, online, decide, func(g Gomega) {
		m := moduleStatus(g, ns)
		rolledBack := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolledBackCondition)
		g.Expect(rolledBack).NotTo(BeNil())
		g.Expect(rolledBack.Message).To(ContainSubstring("v3 rolled back to v2 (4 of 4 Remotes back and ready): Remote canary-1 failed: reported Failed"))
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.StalledCondition)).To(BeTrue())
		g.Expect(held(g)).To(Equal(map[string]string{"canary-1": "v2", "prod-1": "v2", "prod-2": "v2", "rest-1": "v2"}))
		g.Expect(m.Status.History[0].Version).To(Equal("v3"))
		g.Expect(m.Status.History[0].Outcome).To(Equal(fleeetv1.RolloutRolledBack))
	})
	g.Expect(history.of("canary-1")).To(Equal([]string{"v1", "v2", "v3", "v2"}))
	for _, name := range []string{"prod-1", "prod-2", "rest-1"} {
		g.Expect(history.of(name)).NotTo(ContainElement("v3"), "Remote %s of a later stage never moved to v3", name)
	}

	// v4 is healthy on the canary, but undone before its approval.
	setTag("v4")
	driveUntil(g, ns, online, decide, func(g Gomega) {
		g.Expect(held(g)).To(HaveKeyWithValue("canary-1", "v4"))
		g.Expect(moduleStatus(g, ns).Status.Rollout.Holding).To(ContainSubstring("awaits approval"))
	})
	patchModule(g, ns, fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fleeetv1.UndoAnnotation, moduleStatus(g, ns).Status.Rollout.Revision))
	driveUntil(g, ns, online, decide, func(g Gomega) {
		m := moduleStatus(g, ns)
		g.Expect(m.Status.Rollout.RolledBack).NotTo(BeNil())
		g.Expect(m.Status.Rollout.RolledBack.Message).To(Equal("fleetctl rollout undo"))
		g.Expect(m.Status.Rollout.RolledBack.Version).To(Equal("v2"), "back to the newest version Ready across the fleet")
		g.Expect(held(g)).To(HaveKeyWithValue("canary-1", "v2"))
	})
	g.Expect(history.of("prod-1")).To(Equal([]string{"v1", "v2"}))
}

func patchModule(g Gomega, ns, patch string) {
	m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	g.Expect(cluster.Client.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
}

// approve gives a stage of the current revision its approval, as fleetctl
// rollout approve does.
func approve(g Gomega, ns, stage string) {
	revision := moduleStatus(g, ns).Status.Rollout.Revision
	patchModule(g, ns, fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fleeetv1.ApproveAnnotation, revision+"/"+stage))
}
