package module_test

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// heldMessage returns the MESSAGE substitute of the app sync a plan holds,
// or "" when it holds none.
func heldMessage(pa *fleeetv1.ProxyAssemblage) string {
	for _, s := range pa.Spec.Assemblage.Syncs {
		if s.Name == "app" {
			return s.Package.Kustomize.Substitute["MESSAGE"]
		}
	}
	return ""
}

// A change to an override, with the version unchanged, rolls out as a
// version change does: through the canary stage and its approval, and, once
// it fails on the canary, back to the overrides of the last good revision,
// on the Remotes the override picks only; a Remote no override picks never
// moves.
func TestAnOverrideChangeRollsOutThroughStagesAndRollsBack(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	labels := map[string]map[string]string{
		"canary-1": {"stage": "canary", "region": "eu"}, "eu-1": {"region": "eu"}, "us-1": {"region": "us"}}
	online := []string{"canary-1", "eu-1", "us-1"}
	for _, name := range online {
		fleettest.NewRemote(t, cluster.Client, ns, name, labels[name], true)
	}
	m := fleettest.NewModule("v1", &metav1.LabelSelector{})
	m.Namespace = ns
	m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"MESSAGE": "hello"}
	m.Spec.Overrides = []fleeetv1.Override{{Name: "eu", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}},
		Kustomize: &fleeetv1.KustomizeOverride{Substitute: map[string]string{"MESSAGE": "hello-eu"}}}}
	m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, OnFailure: fleeetv1.RollbackOnFailure,
		Stages: []fleeetv1.RolloutStage{{Name: "canary", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"stage": "canary"}},
			Approval: fleeetv1.ManualApproval}}}
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())

	decide := func(remote, message string) fleeetv1.SyncState {
		if message == "broken-eu" {
			return fleeetv1.SyncFailed
		}
		return fleeetv1.SyncReady
	}
	held := func(g Gomega) map[string]string {
		messages := map[string]string{}
		for _, name := range online {
			messages[name] = heldMessage(fleettest.Proxy(g, cluster.Client, ns, name))
		}
		return messages
	}
	setMessage := func(message string) {
		patchModule(g, ns, fmt.Sprintf(`{"spec":{"overrides":[{"name":"eu","selector":{"matchLabels":{"region":"eu"}},"kustomize":{"substitute":{"MESSAGE":%q}}}]}}`, message))
	}
	driveHeld(g, ns, online, heldMessage, decide, func(g Gomega) {
		g.Expect(held(g)).To(Equal(map[string]string{"canary-1": "hello-eu", "eu-1": "hello-eu", "us-1": "hello"}))
		h := fleettest.ModuleStatus(g, cluster.Client, ns).Status.History
		g.Expect(h).NotTo(BeEmpty())
		g.Expect(h[0].Outcome).To(Equal(fleeetv1.RolloutSucceeded))
	})
	history := watchHeldBy(t, ns, heldMessage)

	// The broken override reaches the canary only, fails there and is rolled
	// back to the overrides of the last good revision.
	setMessage("broken-eu")
	driveHeld(g, ns, online, heldMessage, decide, func(g Gomega) {
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
		g.Expect(m.Status.Rollout.RolledBack).NotTo(BeNil())
		g.Expect(held(g)).To(Equal(map[string]string{"canary-1": "hello-eu", "eu-1": "hello-eu", "us-1": "hello"}))
		g.Expect(m.Status.History[0].Outcome).To(Equal(fleeetv1.RolloutRolledBack))
		g.Expect(m.Status.History[0].Overrides[0].Kustomize.Substitute).To(HaveKeyWithValue("MESSAGE", "broken-eu"))
		g.Expect(m.Status.History[1].Overrides[0].Kustomize.Substitute).To(HaveKeyWithValue("MESSAGE", "hello-eu"),
			"history keeps the overrides a rollback restores")
	})
	g.Expect(history.of("canary-1")).To(Equal([]string{"hello-eu", "broken-eu", "hello-eu"}))
	g.Expect(history.of("eu-1")).To(Equal([]string{"hello-eu"}), "a later stage never held the broken override")
	g.Expect(history.of("us-1")).To(Equal([]string{"hello"}), "a Remote no override picks never moved")

	// A good override waits for the canary's approval like a new version.
	setMessage("hi-eu")
	driveHeld(g, ns, online, heldMessage, decide, func(g Gomega) {
		g.Expect(held(g)).To(Equal(map[string]string{"canary-1": "hi-eu", "eu-1": "hello-eu", "us-1": "hello"}))
		g.Expect(fleettest.ModuleStatus(g, cluster.Client, ns).Status.Rollout.Holding).To(ContainSubstring("awaits approval"))
	})
	approve(g, ns, "canary")
	driveHeld(g, ns, online, heldMessage, decide, func(g Gomega) {
		g.Expect(held(g)).To(Equal(map[string]string{"canary-1": "hi-eu", "eu-1": "hi-eu", "us-1": "hello"}))
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue())
	})
	g.Expect(history.of("us-1")).To(Equal([]string{"hello"}))

	// An override selector that does not parse stalls the Module, naming
	// it, and every Remote keeps what it holds.
	patchModule(g, ns, `{"spec":{"overrides":[{"name":"eu","selector":{"matchExpressions":[{"key":"region","operator":"Near"}]},"kustomize":{"substitute":{"MESSAGE":"x"}}}]}}`)
	g.Eventually(func(g Gomega) {
		stalled := apimeta.FindStatusCondition(fleettest.ModuleStatus(g, cluster.Client, ns).Status.Conditions, fleeetv1.StalledCondition)
		g.Expect(stalled).NotTo(BeNil())
		g.Expect(stalled.Reason).To(Equal(fleeetv1.ReasonInvalidSelector))
		g.Expect(stalled.Message).To(ContainSubstring("spec.overrides[eu].selector"))
	}, timeout, poll).Should(Succeed())
	g.Consistently(held, "1s", poll).Should(Equal(map[string]string{"canary-1": "hi-eu", "eu-1": "hi-eu", "us-1": "hello"}))
}
