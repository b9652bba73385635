package module_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

func TestModulesCompileIntoTheProxyAssemblagesOfSelectedRemotes(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	fleettest.NewRemote(t, cluster.Client, ns, "edge-1", map[string]string{"env": "prod", "region": "eu"}, true)
	fleettest.NewRemote(t, cluster.Client, ns, "edge-2", map[string]string{"env": "dev", "region": "us"}, true)
	g.Expect(cluster.Client.Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns}, Data: map[string]string{"domain": "example.com"},
	})).To(Succeed())

	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}})
	m.Namespace = ns
	m.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{
		{Name: "REGION", ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "Remote", FieldPath: "/metadata/labels/region"}},
		{Name: "DOMAIN", ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "ConfigMap", Name: "fleet", FieldPath: "/data/domain"}},
		{Name: "HOST", Value: ptr.To("$(REGION).$(DOMAIN)")},
	}
	m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"host": "$(HOST)", "later": "$(DOWNSTREAM)"}
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(heldTag(fleettest.Proxy(g, cluster.Client, ns, "edge-1"))).To(Equal("v1.0.0"))
		g.Expect(fleettest.Proxy(g, cluster.Client, ns, "edge-2").Spec.Assemblage.Syncs).To(BeEmpty())
		sync := fleettest.Proxy(g, cluster.Client, ns, "edge-1").Spec.Assemblage.Syncs[0]
		g.Expect(sync.Labels).To(Equal(map[string]string{"tier": "app"}))
		g.Expect(sync.Package.Kustomize.Substitute).To(Equal(map[string]string{
			"host": "eu.example.com", "later": "$(DOWNSTREAM)"}), "unknown names are left for the agent")
	}, timeout, poll).Should(Succeed())

	// A ConfigMap change reaches the plan.
	g.Expect(cluster.Client.Patch(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns}, Data: map[string]string{"domain": "example.org"},
	}, client.Merge)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(fleettest.Proxy(g, cluster.Client, ns, "edge-1").Spec.Assemblage.Syncs[0].Package.Kustomize.Substitute).
			To(HaveKeyWithValue("host", "eu.example.org"))
	}, timeout, poll).Should(Succeed())

	// Relabelling moves the sync from one Remote's plan to the other's.
	for name, env := range map[string]string{"edge-1": "dev", "edge-2": "prod"} {
		r := &fleeetv1.Remote{}
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, r)).To(Succeed())
		r.Labels["env"] = env
		g.Expect(cluster.Client.Update(t.Context(), r)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		g.Expect(fleettest.Proxy(g, cluster.Client, ns, "edge-1").Spec.Assemblage.Syncs).To(BeEmpty())
		g.Expect(fleettest.Proxy(g, cluster.Client, ns, "edge-2").Spec.Assemblage.Syncs).To(HaveLen(1))
		g.Expect(fleettest.Proxy(g, cluster.Client, ns, "edge-2").Spec.Assemblage.Syncs[0].Package.Kustomize.Substitute).
			To(HaveKeyWithValue("host", "us.example.org"))
	}, timeout, poll).Should(Succeed())

	// A binding that cannot be resolved is reported, and the plan keeps what it had.
	g.Eventually(func() error {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		m.Spec.ControlPlaneBindings[1].ObjectFieldRef.FieldPath = "/data/missing"
		m.Spec.Sync.Source.Git.Tag = "v2.0.0"
		return cluster.Client.Update(t.Context(), m)
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		ready := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal("BindingFailed"))
		g.Expect(ready.Message).To(ContainSubstring("remote edge-2: spec.controlPlaneBindings[DOMAIN]: ConfigMap fleet: field /data/missing not found"))
	}, timeout, poll).Should(Succeed())
	g.Expect(heldTag(fleettest.Proxy(g, cluster.Client, ns, "edge-2"))).To(Equal("v1.0.0"))
	// The compiler's stamp is where the Module controller read that from.
	stamp := fleettest.Proxy(g, cluster.Client, ns, "edge-2").CompiledSyncs()["app"]
	g.Expect(stamp.Generation).To(Equal(m.Generation))
	g.Expect(stamp.Pending).To(BeTrue())
	g.Expect(stamp.BindingError).To(ContainSubstring("field /data/missing not found"))
}

// A rolling update at maxUnavailable 1, its Remotes' agents reading
// CompiledPlans, never has two online Remotes unavailable at once.
func TestRollingUpdateNeverExceedsMaxUnavailable(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	online := []string{"r1", "r2", "r3", "r4", "r5"}
	for _, name := range online {
		fleettest.NewRemote(t, cluster.Client, ns, name, map[string]string{"fleet": "yes"}, true)
		readsPlans(g, ns, name)
	}
	away := []string{"r6-offline", "r7-offline"}
	for _, name := range away {
		fleettest.NewRemote(t, cluster.Client, ns, name, map[string]string{"fleet": "yes"}, false)
	}

	m := fleettest.NewModule("v1", &metav1.LabelSelector{})
	m.Namespace = ns
	m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())

	ready := func(string, string) fleeetv1.SyncState { return fleeetv1.SyncReady }
	// First placement: every Remote gets v1 (nothing runs yet, nothing to
	// lose); those offline had reported it Ready before they went away.
	driveUntil(g, ns, append(slices.Clone(online), away...), ready, func(g Gomega) {
		s := fleettest.ModuleStatus(g, cluster.Client, ns).Status.Summary
		g.Expect(s.Ready).To(Equal(int32(7)))
		g.Expect(s.Offline).To(Equal(int32(2)))
	})
	// From here on, every version change is a rollout the watch holds to its bound.
	rw := fleettest.WatchRollout(t, cluster.Config, ns, online, 1, "v1", "v2", "v3", "v4")

	setTag := func(tag string) {
		g.Eventually(func() error {
			m := fleettest.ModuleStatus(g, cluster.Client, ns)
			m.Spec.Sync.Source.Git.Tag = tag
			return cluster.Client.Update(t.Context(), m)
		}, timeout, poll).Should(Succeed())
	}

	// v2, superseded by v3 once two Remotes run v2.
	setTag("v2")
	driveUntil(g, ns, online, ready, func(g Gomega) {
		n := 0
		for _, name := range online {
			if heldTag(fleettest.Proxy(g, cluster.Client, ns, name)) == "v2" {
				n++
			}
		}
		g.Expect(n).To(BeNumerically(">=", 2))
	})
	setTag("v3")
	// r1 fails on v3: the rollout pauses and goes no further.
	fails := func(remote, tag string) fleeetv1.SyncState {
		if tag == "v3" && remote == "r1" {
			return fleeetv1.SyncFailed
		}
		return fleeetv1.SyncReady
	}
	driveUntil(g, ns, online, fails, func(g Gomega) {
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
		paused := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)
		g.Expect(paused).NotTo(BeNil())
		g.Expect(paused.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(paused.Message).To(HavePrefix("Remote r1 failed on v3"))
		g.Expect(m.Status.Rollout.PausedBy).To(Equal("r1"))
		g.Expect(m.Status.Rollout.Admitted).To(BeEmpty(), "no Remote is admitted while the rollout is paused")
	})

	// r1 repaired: the rollout resumes and every online Remote reaches v3.
	driveUntil(g, ns, online, ready, func(g Gomega) {
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
		g.Expect(apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)).To(BeNil())
		for _, name := range online {
			g.Expect(heldTag(fleettest.Proxy(g, cluster.Client, ns, name))).To(Equal("v3"), "Remote %s", name)
		}
	})

	// A newer version; everything online converges. The offline Remotes
	// are admitted nothing while offline: they keep the first version.
	setTag("v4")
	driveUntil(g, ns, online, ready, func(g Gomega) {
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
		g.Expect(m.Status.Summary.Updated).To(Equal(int32(5)))
		g.Expect(m.Status.Summary.Ready).To(Equal(int32(5)))
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue())
		g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))
		g.Expect(apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)).To(BeNil())
		g.Expect(m.Status.Version).To(Equal("v4"))
	})
	for _, name := range away {
		g.Expect(heldTag(fleettest.Proxy(g, cluster.Client, ns, name))).To(Equal("v1"), name)
	}
	rw.Check(g)
	g.Expect(rw.Peak()).To(Equal(1), "the watch saw the rollout move one Remote at a time")

	// Both come back at once, as after an outage or a restore from an old
	// backup: they move one at a time too.
	back := fleettest.WatchRollout(t, cluster.Config, ns, append(slices.Clone(online), away...), 1, "v1", "v4")
	for _, name := range away {
		fleettest.Heartbeat(t, cluster.Client, ns, name)
	}
	driveUntil(g, ns, append(slices.Clone(online), away...), ready, func(g Gomega) {
		for _, name := range away {
			g.Expect(heldTag(fleettest.Proxy(g, cluster.Client, ns, name))).To(Equal("v4"), name)
		}
		g.Expect(fleettest.ModuleStatus(g, cluster.Client, ns).Status.Summary.Ready).To(Equal(int32(7)))
	})
	back.Check(g)
	g.Expect(back.Peak()).To(Equal(1), "the Remotes back online moved one at a time")
}

// TestSuspendHoldsWhatRuns: a suspended Module keeps every plan at the
// version it had, and a suspended Remote keeps its plan as it is while the
// rollout passes it by; clearing either catches up.
func TestSuspendHoldsWhatRuns(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	fleettest.NewRemote(t, cluster.Client, ns, "running", map[string]string{"env": "prod"}, true)
	fleettest.NewRemote(t, cluster.Client, ns, "held", map[string]string{"env": "prod"}, true)
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
	m.Namespace = ns
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	tags := func(g Gomega) []string {
		return []string{heldTag(fleettest.Proxy(g, cluster.Client, ns, "held")), heldTag(fleettest.Proxy(g, cluster.Client, ns, "running"))}
	}
	g.Eventually(tags, timeout, poll).Should(Equal([]string{"v1.0.0", "v1.0.0"}))

	setSuspend := func(obj client.Object, suspend bool) {
		patch := []byte(fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend))
		g.Expect(cluster.Client.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	}
	setVersion := func(tag string) {
		patch := []byte(fmt.Sprintf(`{"spec":{"sync":{"source":{"git":{"tag":%q}}}}}`, tag))
		g.Expect(cluster.Client.Patch(t.Context(), m, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	}

	// A suspended Module: a new version reaches no plan, and says why.
	setSuspend(m, true)
	setVersion("v2.0.0")
	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		ready := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal("Suspended"))
		g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))
	}, timeout, poll).Should(Succeed())
	g.Consistently(tags, 3*time.Second, poll).Should(Equal([]string{"v1.0.0", "v1.0.0"}))

	// A suspended Remote: the resumed Module reaches every other Remote.
	setSuspend(&fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held"}}, true)
	setSuspend(m, false)
	g.Eventually(tags, timeout, poll).Should(Equal([]string{"v1.0.0", "v2.0.0"}))
	report(g, ns, "running", fleeetv1.SyncReady)
	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 2, Updated: 1, Ready: 1, Suspended: 1}))
	}, timeout, poll).Should(Succeed())
	g.Consistently(tags, 3*time.Second, poll).Should(Equal([]string{"v1.0.0", "v2.0.0"}))

	// Resumed, it catches up.
	setSuspend(&fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held"}}, false)
	g.Eventually(tags, timeout, poll).Should(Equal([]string{"v2.0.0", "v2.0.0"}))
}
