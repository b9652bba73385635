package e2e

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/demo"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// stagedRollout takes the converged demo fleet (backend v1.2.0 everywhere)
// through three stages: edge-1 as canary awaiting approval, edge-2, then
// edge-3. A version whose pods never get ready misses its progress
// deadline on the canary and is rolled back there by the manager alone,
// its pods replaced by v1.2.0's again, while no later stage ever holds it;
// a good version goes through once approved; the next is undone from the
// canary. The fleet ends on v1.4.0.
func stagedRollout(t *testing.T, fleet *demo.Fleet) {
	g := testenv.Assertions(t)
	ctx := t.Context()
	c := fleet.Management.Client
	recordedSucceeded(t, fleet, "v1.2.0")
	for name, ring := range map[string]string{"edge-1": "canary", "edge-2": "wave"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"ring":%q}}}`, ring)
		g.Expect(c.Patch(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: name}},
			client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
	}
	g.Expect(c.Patch(ctx, &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: demo.Backend}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"rollout":{"onFailure":"Rollback","progressDeadlineSeconds":20,"stages":[`+
			`{"name":"canary","selector":{"matchLabels":{"ring":"canary"}},"approval":"Manual"},`+
			`{"name":"wave","selector":{"matchLabels":{"ring":"wave"}}}]}}}`)))).To(Succeed())
	held, stop := watchBackend(t, fleet)
	defer stop()
	backend := func(g Gomega) *fleeetv1.Module {
		m := &fleeetv1.Module{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: demo.Backend}, m)).To(Succeed())
		return m
	}

	// v1.3.0's pods never get ready; Flux would wait a minute, the rollout
	// 20 s: the canary fails its deadline and goes back to v1.2.0.
	fleet.CommitBackend(t, "v1.3.0", func(name string, content []byte) []byte {
		if name != "deployment.yaml" {
			return content
		}
		return bytes.Replace(content, []byte("localhost:9898/readyz"), []byte("localhost:9898/never-ready"), 1)
	})
	setBackend(t, fleet, "v1.3.0", time.Minute)
	g.Eventually(func(g Gomega) {
		rolledBack := apimeta.FindStatusCondition(backend(g).Status.Conditions, fleeetv1.RolledBackCondition)
		g.Expect(rolledBack).NotTo(BeNil())
		g.Expect(rolledBack.Message).To(And(HavePrefix("v1.3.0 rolled back to v1.2.0"),
			ContainSubstring("Remote edge-1 failed: not available within progressDeadlineSeconds")))
	}, 3*time.Minute, time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) [][]string { return statusCells(ctx, g, fleet)[1:] }, 3*time.Minute, time.Second).Should(Equal([][]string{
		{"edge-1", "ready v1.2.0* 1/1 pods", "ready " + fleet.FrontendChartVersion + " 1/1 pods"},
		{"edge-2", "ready v1.2.0* 1/1 pods", "ready " + fleet.FrontendChartVersion + " 1/1 pods"},
		{"edge-3", "ready v1.2.0* 1/1 pods", "ready " + fleet.FrontendChartVersion + " 1/1 pods"},
	}), "the canary runs v1.2.0's pods again, Ready")
	g.Expect(held.of("edge-1")).To(Equal([]string{"v1.2.0", "v1.3.0", "v1.2.0"}))
	g.Expect(testenv.Metrics(g, fleet.ManagerMetrics, fleet.ManagerMetricsToken)).To(
		ContainSubstring(`fleeet_module_rollout_state{module="backend",namespace="team-a",state="rolled_back"} 1`), "what an alert on rollbacks reads")

	// v1.4.0 is good: the canary takes it, then the rollout waits for its
	// approval, then edge-2 and edge-3 follow. The 20 s deadline was for
	// v1.3.0, whose pods never get ready however long they get; a good
	// version on a busy machine (the other test lane beside this one) can
	// take longer than 20 s to become available and would be rolled back,
	// so the deadline is raised before it.
	g.Expect(c.Patch(ctx, &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: demo.Backend}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"rollout":{"progressDeadlineSeconds":300}}}`)))).To(Succeed())
	fleet.CommitBackend(t, "v1.4.0", nil)
	setBackend(t, fleet, "v1.4.0", 0)
	g.Eventually(func(g Gomega) string {
		out, err := fleet.Fleetctl(ctx, "rollout", "status", demo.Backend)
		g.Expect(err).NotTo(HaveOccurred())
		return out
	}, 3*time.Minute, time.Second).Should(ContainSubstring("holding: stage canary awaits approval"))
	g.Consistently(func() []string { return held.of("edge-2") }, 5*time.Second, time.Second).Should(Equal([]string{"v1.2.0"}),
		"no approval, no second stage")
	out, err := fleet.Fleetctl(ctx, "rollout", "approve", demo.Backend)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("module/backend: stage canary of v1.4.0 approved\n"))
	if err := fleet.WaitConverged(ctx, 5*time.Minute); err != nil {
		t.Fatalf("after the approval: %v", err)
	}
	recordedSucceeded(t, fleet, "v1.4.0")

	// v1.5.0 reaches the canary and is undone from there.
	fleet.CommitBackend(t, "v1.5.0", nil)
	setBackend(t, fleet, "v1.5.0", 0)
	g.Eventually(func(g Gomega) {
		g.Expect(backend(g).Status.Rollout.Holding).To(Equal("stage canary awaits approval (fleetctl rollout approve)"))
	}, 3*time.Minute, time.Second).Should(Succeed())
	out, err = fleet.Fleetctl(ctx, "rollout", "undo", demo.Backend)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("module/backend: rolling v1.5.0 back to v1.4.0\n"))
	g.Eventually(func(g Gomega) []string {
		g.Expect(backend(g).Status.Rollout.RolledBack).NotTo(BeNil())
		return held.of("edge-1")
	}, 3*time.Minute, time.Second).Should(endWith("v1.4.0", "v1.5.0", "v1.4.0"))
	out, err = fleet.Fleetctl(ctx, "rollout", "history", demo.Backend)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(historyColumns(out)).To(HaveExactElements([]string{"v1.5.0", "RolledBack"}, []string{"v1.4.0", "Succeeded"},
		[]string{"v1.3.0", "RolledBack"}, []string{"v1.2.0", "Succeeded"}, []string{"v1.0.0", "Succeeded"}))

	for _, name := range []string{"edge-2", "edge-3"} {
		g.Expect(held.of(name)).To(Equal([]string{"v1.2.0", "v1.4.0"}), "%s of a later stage held only the versions that passed the canary", name)
	}
	// Back to the version the fleet runs, so the rest of the test sees it converged.
	setBackend(t, fleet, "v1.4.0", 0)
	if err := fleet.WaitConverged(ctx, 3*time.Minute); err != nil {
		t.Fatalf("back on v1.4.0: %v", err)
	}
}

// endWith succeeds for a slice ending with the given elements.
func endWith(want ...string) OmegaMatcher {
	return WithTransform(func(got []string) []string {
		return got[max(0, len(got)-len(want)):]
	}, Equal(want))
}

// historyColumns is the VERSION and OUTCOME of each row of fleetctl rollout
// history.
func historyColumns(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		if f := demo.Cells(line); len(f) >= 3 {
			rows = append(rows, f[1:3])
		}
	}
	return rows
}

// backendHistory records, from a watch over every plan, the sequence of
// backend versions each cluster's plan held.
type backendHistory struct {
	mu   sync.Mutex
	tags map[string][]string
}

func watchBackend(t *testing.T, fleet *demo.Fleet) (*backendHistory, func()) {
	wc, err := client.NewWithWatch(fleet.Management.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(t.Context(), &fleeetv1.ProxyAssemblageList{}, client.InNamespace(demo.Tenant))
	if err != nil {
		t.Fatal(err)
	}
	h := &backendHistory{tags: map[string][]string{}}
	contents := &fleettest.Contents{Reader: fleet.Management.Client}
	go func() {
		for ev := range w.ResultChan() {
			pa, ok := ev.Object.(*fleeetv1.ProxyAssemblage)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			tag := ""
			if s := compile.Find(contents.Syncs(pa), demo.Backend); s != nil {
				tag = s.Source.Git.Tag
			}
			h.mu.Lock()
			if seq := h.tags[pa.Name]; len(seq) == 0 || seq[len(seq)-1] != tag {
				h.tags[pa.Name] = append(seq, tag)
			}
			h.mu.Unlock()
		}
	}()
	// The watch starts with every plan as it is.
	NewWithT(t).Eventually(func() int { return len(h.of("edge-1")) }, time.Minute, 100*time.Millisecond).Should(Equal(1))
	return h, w.Stop
}

func (h *backendHistory) of(name string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.tags[name])
}

// recordedSucceeded waits until the backend Module's history records
// version Succeeded, as the version a rollback returns to. Every cluster
// reports a version Ready a moment before the Module controller records
// it: a version changed in that moment never becomes a rollback target.
func recordedSucceeded(t *testing.T, fleet *demo.Fleet, version string) {
	testenv.Assertions(t).Eventually(func(g Gomega) {
		m := &fleeetv1.Module{}
		g.Expect(fleet.Management.Client.Get(t.Context(), client.ObjectKey{Namespace: demo.Tenant, Name: demo.Backend}, m)).To(Succeed())
		g.Expect(m.Status.History).NotTo(BeEmpty())
		g.Expect(m.Status.History[0]).To(And(HaveField("Version", version), HaveField("Outcome", fleeetv1.RolloutSucceeded)))
	}, time.Minute, time.Second).Should(Succeed(), "the rollback target %s recorded", version)
}
