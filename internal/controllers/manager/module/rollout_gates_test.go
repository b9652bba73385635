package module_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// heldHistory records, from a watch over every plan of a namespace, the
// sequence of versions each Remote held.
type heldHistory struct {
	mu   sync.Mutex
	tags map[string][]string
}

func watchHeld(t *testing.T, ns string) *heldHistory {
	return watchHeldBy(t, ns, heldTag)
}

// watchHeldBy is watchHeld recording what held says each plan holds.
func watchHeldBy(t *testing.T, ns string, held func(*fleeetv1.ProxyAssemblage) string) *heldHistory {
	h := &heldHistory{tags: map[string][]string{}}
	onPlans(t, ns, func(pa *fleeetv1.ProxyAssemblage) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if seq, tag := h.tags[pa.Name], held(pa); len(seq) == 0 || seq[len(seq)-1] != tag {
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
// a healthy version back on demand. The agents of canary-1 and prod-1
// read CompiledPlans, those of prod-2 and rest-1 (one minor behind) do
// not: one rollout moves plans of both forms.
func TestAStagedRolloutWaitsForApprovalAndRollsBackByItself(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	stages := map[string]string{"canary-1": "canary", "prod-1": "prod", "prod-2": "prod", "rest-1": ""}
	online := []string{"canary-1", "prod-1", "prod-2", "rest-1"}
	for _, name := range online {
		fleettest.NewRemote(t, cluster.Client, ns, name, map[string]string{"stage": stages[name]}, true)
	}
	readsPlans(g, ns, "canary-1")
	readsPlans(g, ns, "prod-1")
	m := fleettest.NewModule("v1", &metav1.LabelSelector{})
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
			m := fleettest.ModuleStatus(g, cluster.Client, ns)
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
	held := func(g Gomega) map[string]string { return heldTags(g, ns, online) }
	driveUntil(g, ns, online, decide, converged("v1"))
	for name, shared := range map[string]bool{"canary-1": true, "prod-1": true, "prod-2": false, "rest-1": false} {
		g.Expect(fleettest.Proxy(g, cluster.Client, ns, name).Spec.CompiledPlan != "").To(Equal(shared), "plan %s names a CompiledPlan", name)
	}
	history := watchHeld(t, ns)

	// v2: the canary moves, then the rollout waits for its approval.
	setTag("v2")
	driveUntil(g, ns, online, decide, func(g Gomega) {
		g.Expect(held(g)).To(Equal(map[string]string{"canary-1": "v2", "prod-1": "v1", "prod-2": "v1", "rest-1": "v1"}))
		ro := fleettest.ModuleStatus(g, cluster.Client, ns).Status.Rollout
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
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
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
		g.Expect(fleettest.ModuleStatus(g, cluster.Client, ns).Status.Rollout.Holding).To(ContainSubstring("awaits approval"))
	})
	patchModule(g, ns, fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fleeetv1.UndoAnnotation, fleettest.ModuleStatus(g, cluster.Client, ns).Status.Rollout.Revision))
	driveUntil(g, ns, online, decide, func(g Gomega) {
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
		g.Expect(m.Status.Rollout.RolledBack).NotTo(BeNil())
		g.Expect(m.Status.Rollout.RolledBack.Message).To(Equal("fleetctl rollout undo"))
		g.Expect(m.Status.Rollout.RolledBack.Version).To(Equal("v2"), "back to the newest version Ready across the fleet")
		g.Expect(held(g)).To(HaveKeyWithValue("canary-1", "v2"))
	})
	g.Expect(history.of("prod-1")).To(Equal([]string{"v1", "v2"}))
}

func patchModule(g Gomega, ns, patch string) {
	patchNamed(g, ns, "app", patch)
}

func patchNamed(g Gomega, ns, name, patch string) {
	m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	g.Expect(cluster.Client.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
}

// approve gives a stage of the current revision its approval, as fleetctl
// rollout approve does.
func approve(g Gomega, ns, stage string) {
	revision := fleettest.ModuleStatus(g, cluster.Client, ns).Status.Rollout.Revision
	patchModule(g, ns, fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fleeetv1.ApproveAnnotation, revision+"/"+stage))
}

// Two Modules' rolling updates in a namespace capped at one Remote moving
// at once: each alone could move two Remotes, together they never have more
// than one moving, as a watch over every plan counts. (A Remote whose plan
// changed for one Module is unavailable to the other too, which may move it
// at no cost: moving Remotes, not syncs, are what the cap bounds.)
func TestANamespaceBudgetHoldsEveryRolloutInItToItsBound(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	patchNamespace(g, ns, fmt.Sprintf(`{"metadata":{"annotations":{%q:"1"}}}`, fleeetv1.MaxMovingAnnotation))
	online := []string{"r1", "r2", "r3"}
	for _, name := range online {
		fleettest.NewRemote(t, cluster.Client, ns, name, nil, true)
	}
	for _, name := range []string{"app", "web"} {
		m := fleettest.NewModule("v1", &metav1.LabelSelector{})
		m.Namespace, m.Name = ns, name
		m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, MaxUnavailable: ptr.To(intstr.FromInt32(2))}
		g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	}
	ready := func(string, string) fleeetv1.SyncState { return fleeetv1.SyncReady }
	holdAll := func(tag string) func(Gomega) {
		return func(g Gomega) {
			for _, name := range online {
				pa := fleettest.Proxy(g, cluster.Client, ns, name)
				g.Expect(pa.Spec.Assemblage.Syncs).To(HaveLen(2))
				for _, s := range pa.Spec.Assemblage.Syncs {
					g.Expect(s.Source.Git.Tag).To(Equal(tag), "Remote %s, sync %s", name, s.Name)
				}
				g.Expect(pa.Status.ObservedGeneration).To(Equal(pa.Generation))
			}
		}
	}
	driveUntil(g, ns, online, ready, holdAll("v1"))

	var mu sync.Mutex
	peak := 0
	moving := map[string]bool{} // Remote → holds a v2 sync not reported Ready
	onPlans(t, ns, func(pa *fleeetv1.ProxyAssemblage) {
		mu.Lock()
		defer mu.Unlock()
		moving[pa.Name] = slices.ContainsFunc(pa.Spec.Assemblage.Syncs, func(s fleeetv1.NamedSync) bool {
			reported := pa.Status.ObservedGeneration == pa.Generation && slices.ContainsFunc(pa.Status.Syncs,
				func(st fleeetv1.SyncStatus) bool { return st.Name == s.Name && st.State == fleeetv1.SyncReady })
			return s.Source.Git.Tag == "v2" && !reported
		})
		n := 0
		for _, m := range moving {
			if m {
				n++
			}
		}
		peak = max(peak, n)
	})
	for _, name := range []string{"app", "web"} {
		patchNamed(g, ns, name, `{"spec":{"sync":{"source":{"git":{"tag":"v2"}}}}}`)
	}
	driveUntil(g, ns, online, ready, holdAll("v2"))
	mu.Lock()
	defer mu.Unlock()
	g.Expect(peak).To(Equal(1), "never more than the namespace's one Remote moving, across both Modules")
}

func patchNamespace(g Gomega, ns, patch string) {
	g.Expect(cluster.Client.Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
}

// A deployment window closing mid-rollout: the Remote already moving
// finishes, no other starts until the window opens again. The windows are
// edited here, as a clock would move through them; the rollout keeps its
// place across the edits.
func TestAClosedWindowLetsWhatMovesFinishAndStartsNothing(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	online := []string{"r1", "r2", "r3"}
	for _, name := range online {
		fleettest.NewRemote(t, cluster.Client, ns, name, nil, true)
	}
	m := fleettest.NewModule("v1", &metav1.LabelSelector{})
	m.Namespace = ns
	m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy}
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	ready := func(string, string) fleeetv1.SyncState { return fleeetv1.SyncReady }
	driveUntil(g, ns, online, ready, func(g Gomega) {
		g.Expect(fleettest.ModuleStatus(g, cluster.Client, ns).Status.Summary.Ready).To(Equal(int32(3)))
	})

	// v2 starts on one Remote, which the agent does not report yet.
	patchModule(g, ns, `{"spec":{"sync":{"source":{"git":{"tag":"v2"}}}}}`)
	var first string
	g.Eventually(func(g Gomega) {
		moved := 0
		for _, name := range online {
			if heldTag(fleettest.Proxy(g, cluster.Client, ns, name)) == "v2" {
				first, moved = name, moved+1
			}
		}
		g.Expect(moved).To(Equal(1))
	}, timeout, poll).Should(Succeed())

	// The window closes: only on New Year's Day.
	patchModule(g, ns, `{"spec":{"rollout":{"windows":[{"schedule":"0 0 1 1 *","duration":"1h","timeZone":"Europe/Berlin"}]}}}`)
	g.Eventually(func(g Gomega) {
		g.Expect(fleettest.ModuleStatus(g, cluster.Client, ns).Status.Rollout.Holding).To(HavePrefix("outside its deployment windows until "))
	}, timeout, poll).Should(Succeed())
	driveUntil(g, ns, online, ready, func(g Gomega) {
		g.Expect(fleettest.Proxy(g, cluster.Client, ns, first).Status.Syncs).To(ConsistOf(HaveField("State", fleeetv1.SyncReady)))
		g.Expect(heldTag(fleettest.Proxy(g, cluster.Client, ns, first))).To(Equal("v2"), "what was moving finished")
	})
	g.Consistently(func(g Gomega) int {
		moved := 0
		for _, name := range online {
			if heldTag(fleettest.Proxy(g, cluster.Client, ns, name)) == "v2" {
				moved++
			}
		}
		return moved
	}, "3s", poll).Should(Equal(1), "nothing new starts while the window is closed")

	// It opens again (every minute, for a day): the rollout goes on.
	patchModule(g, ns, `{"spec":{"rollout":{"windows":[{"schedule":"* * * * *","duration":"24h"}]}}}`)
	driveUntil(g, ns, online, ready, func(g Gomega) {
		for _, name := range online {
			g.Expect(heldTag(fleettest.Proxy(g, cluster.Client, ns, name))).To(Equal("v2"))
		}
		g.Expect(apimeta.IsStatusConditionTrue(fleettest.ModuleStatus(g, cluster.Client, ns).Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue())
	})
}

// TestAPauseOutlivesAGitOpsToolApplyingTheSpec: the Module is kept in git
// and applied as Flux's kustomize-controller applies it (server-side apply
// of the whole spec, forcing ownership, field manager kustomize-controller,
// spec.rollout.paused declared false). The pause fleetctl rollout pause
// writes, an annotation, holds every version that tool applies until it is
// removed; a pause declared in git holds on after that; RolloutPaused names
// each.
func TestAPauseOutlivesAGitOpsToolApplyingTheSpec(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	online := []string{"r1", "r2"}
	for _, name := range online {
		fleettest.NewRemote(t, cluster.Client, ns, name, nil, true)
	}
	fluxApply := func(tag string, paused bool) {
		u := &unstructured.Unstructured{}
		g.Expect(yaml.Unmarshal(fmt.Appendf(nil, `
apiVersion: fleeet.dev/v1alpha1
kind: Module
metadata: {name: app, namespace: %s}
spec:
  selector: {}
  sync:
    source: {git: {url: "https://git.example.com/app.git", tag: %s}}
    package: {kustomize: {path: ./deploy}}
  rollout: {strategy: RollingUpdate, paused: %t}
`, ns, tag, paused), &u.Object)).To(Succeed())
		g.Expect(cluster.Client.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(u),
			client.FieldOwner("kustomize-controller"), client.ForceOwnership)).To(Succeed())
	}
	ready := func(string, string) fleeetv1.SyncState { return fleeetv1.SyncReady }
	holdAll := func(g Gomega, tag string) {
		for _, name := range online {
			g.Expect(heldTag(fleettest.Proxy(g, cluster.Client, ns, name))).To(Equal(tag), "Remote %s", name)
		}
	}
	// pausedAt waits for the Module to have planned tag, paused for reason
	// with a message holding msg, and checks nothing moved to it.
	pausedAt := func(tag, reason, msg string) {
		driveUntil(g, ns, online, ready, func(g Gomega) {
			m := fleettest.ModuleStatus(g, cluster.Client, ns)
			g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))
			g.Expect(m.Status.Version).To(Equal(tag))
			paused := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)
			g.Expect(paused).NotTo(BeNil())
			g.Expect(paused.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(paused.Reason).To(Equal(reason))
			g.Expect(paused.Message).To(Equal(msg))
			g.Expect(m.Status.Rollout.Holding).To(Equal(msg))
			g.Expect(m.Status.Rollout.Admitted).To(BeEmpty())
		})
		holdAll(g, "v1")
	}

	fluxApply("v1", false)
	driveUntil(g, ns, online, ready, func(g Gomega) { holdAll(g, "v1") })

	// fleetctl rollout pause, then the next commit reaches the cluster.
	patchModule(g, ns, fmt.Sprintf(`{"metadata":{"annotations":{%q:"2026-11-25T23:00:00Z: freeze"}}}`, fleeetv1.PauseAnnotation))
	fluxApply("v2", false)
	pausedAt("v2", fleeetv1.ReasonPausedByAnnotation,
		`paused by annotation fleeet.dev/pause "2026-11-25T23:00:00Z: freeze" (fleetctl rollout resume app removes it)`)
	g.Expect(fleettest.ModuleStatus(g, cluster.Client, ns).Spec.Rollout.Paused).To(BeFalse(), "git declares no pause")

	// Git declares a pause too; fleetctl rollout resume lifts only its own.
	fluxApply("v2", true)
	patchModule(g, ns, fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, fleeetv1.PauseAnnotation))
	pausedAt("v2", fleeetv1.ReasonPausedBySpec, "paused by spec.rollout.paused (set it to false where the spec is kept)")

	// Git lifts its pause: the rollout goes on.
	fluxApply("v2", false)
	driveUntil(g, ns, online, ready, func(g Gomega) {
		holdAll(g, "v2")
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
		g.Expect(apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)).To(BeNil())
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue())
	})
}
