package upstream_test

import (
	"context"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/flux"
)

// namedSync is the app sync under another name, depending on deps.
func namedSync(name string, deps ...string) fleeetv1.NamedSync {
	s := appSync("v1.0.0")
	s.Name = name
	for _, d := range deps {
		s.DependsOn = append(s.DependsOn, fleeetv1.Dependency{Name: d})
	}
	return s
}

// writePart writes part k of the cluster's plan in the management cluster
// as the compiler does: the syncs it holds, carrying rev.
func (l *linked) writePart(t testing.TB, k int, rev string, syncs ...fleeetv1.NamedSync) {
	t.Helper()
	mc := l.mgmt.Client
	pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: fleeetv1.PlanPartName(clusterName, k)}}
	NewWithT(t).Eventually(func() error {
		err := mc.Get(t.Context(), client.ObjectKeyFromObject(pa), pa)
		pa.Spec.Assemblage = fleeetv1.AssemblageSpec{Syncs: syncs, PartRevision: rev}
		if apierrors.IsNotFound(err) {
			return mc.Create(t.Context(), pa)
		}
		if err != nil {
			return err
		}
		return mc.Update(t.Context(), pa)
	}, timeout, poll).Should(Succeed())
}

// listParts makes part 0 of the cluster's plan list the further parts'
// revisions, as the compiler does last.
func (l *linked) listParts(t *testing.T, revs ...string) {
	t.Helper()
	mc := l.mgmt.Client
	NewWithT(t).Eventually(func() error {
		if err := mc.Get(t.Context(), client.ObjectKeyFromObject(l.plan), l.plan); err != nil {
			return err
		}
		l.plan.Spec.Assemblage.Parts = revs
		return mc.Update(t.Context(), l.plan)
	}, timeout, poll).Should(Succeed())
}

// mirroredPart returns the local Assemblage holding part k, checking it is
// owned by part 0 and carries rev.
func (l *linked) mirroredPart(g Gomega, k int, rev string) *fleeetv1.Assemblage {
	dc, ctx := l.down.Client, context.Background()
	first, asm := &fleeetv1.Assemblage{}, &fleeetv1.Assemblage{}
	g.Expect(dc.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: l.up.Name}, first)).To(Succeed())
	g.Expect(dc.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: fleeetv1.PlanPartName(l.up.Name, k)}, asm)).To(Succeed())
	g.Expect(asm.Spec.PartRevision).To(Equal(rev))
	g.Expect(asm.Spec.ServiceAccountName).To(Equal("team"), "the tenant's ServiceAccount applies every part")
	g.Expect(metav1.IsControlledBy(asm, first)).To(BeTrue(), "part %d goes with part 0", k)
	return asm
}

// reported returns the syncs the cluster reports on part k of its plan,
// once the report is about the part's current generation.
func (l *linked) reported(g Gomega, k int) map[string]fleeetv1.SyncStatus {
	pa := &fleeetv1.ProxyAssemblage{}
	g.Expect(l.mgmt.Client.Get(context.Background(), client.ObjectKey{Namespace: l.ns, Name: fleeetv1.PlanPartName(clusterName, k)}, pa)).To(Succeed())
	g.Expect(pa.Status.ObservedGeneration).To(Equal(pa.Generation), "part %d", k)
	out := map[string]fleeetv1.SyncStatus{}
	for _, s := range pa.Status.Syncs {
		out[s.Name] = s
	}
	g.Expect(pa.Status.Summary.Total).To(Equal(int32(len(out))), "part %d summarises its own syncs", k)
	return out
}

// kustomization reads the Kustomization of a sync of the plan downstream.
func (l *linked) kustomization(sync string) error {
	return l.down.Client.Get(context.Background(), client.ObjectKey{Namespace: l.tenant, Name: flux.ObjectName(l.up.Name, sync)}, &kustomizev1.Kustomization{})
}

// A plan split over three ProxyAssemblages is mirrored 1:1 once every part
// is read at its listed revision; each part's status comes back to its own
// ProxyAssemblage. A part behind the revision part 0 lists changes nothing
// downstream, and the Upstream says which part, until it is written at that
// revision; a part no longer listed is deleted downstream. No Flux controller runs here: the app sync never gets
// Ready, so b, which depends on it from another part, stays Blocked.
func TestASplitPlanIsMirroredWholeAndReportedPerPart(t *testing.T) {
	g := NewWithT(t)
	l := link(t)
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))

	l.writePart(t, 1, "r1", namedSync("b", "app"))
	l.writePart(t, 2, "r2", namedSync("c"))
	l.listParts(t, "r1", "r2")
	g.Eventually(func(g Gomega) {
		g.Expect(l.mirroredPart(g, 1, "r1").Spec.Syncs).To(ConsistOf(HaveField("Name", "b")))
		g.Expect(l.mirroredPart(g, 2, "r2").Spec.Syncs).To(ConsistOf(HaveField("Name", "c")))
		g.Expect(l.mirroredTag(g)).To(Equal("v1.0.0"))
		g.Expect(l.kustomization("c")).To(Succeed(), "a sync of a further part is applied")
		g.Expect(l.reported(g, 0)).To(ConsistOf(HaveField("Name", "app")))
		g.Expect(l.reported(g, 1)).To(HaveKeyWithValue("b", And(
			HaveField("State", fleeetv1.SyncBlocked), HaveField("BlockedBy", []string{"app"}))))
		g.Expect(l.reported(g, 2)).To(HaveKeyWithValue("c", HaveField("State", fleeetv1.SyncProgressing)))
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
	}, timeout, poll).Should(Succeed())
	g.Expect(apierrors.IsNotFound(l.kustomization("b"))).To(BeTrue(), "b waits for app, in another part")

	// Part 0 lists a revision of part 2 the agent cannot read yet.
	l.listParts(t, "r1", "r3")
	g.Eventually(func(g Gomega) {
		c := l.condition(g, fleeetv1.ReadyCondition)
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonPlanIncomplete))
		g.Expect(c.Message).To(ContainSubstring(`part 2 of 3 is at revision "r2", the plan lists "r3"`))
	}, timeout, poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(l.mirroredPart(g, 2, "r2").Spec.Syncs).To(HaveLen(1))
		g.Expect(l.kustomization("c")).To(Succeed())
	}, 2*time.Second, poll).Should(Succeed(), "nothing changes downstream from a plan not read whole")

	// Part 2 arrives at that revision, without c: c is removed.
	l.writePart(t, 2, "r3")
	g.Eventually(func(g Gomega) {
		g.Expect(l.mirroredPart(g, 2, "r3").Spec.Syncs).To(BeEmpty())
		g.Expect(apierrors.IsNotFound(l.kustomization("c"))).To(BeTrue(), "c is removed")
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
	}, timeout, poll).Should(Succeed())

	// Part 0 now lists part 1 only: part 2 goes downstream.
	l.listParts(t, "r1")
	g.Eventually(func(g Gomega) {
		err := l.down.Client.Get(context.Background(), client.ObjectKey{Namespace: l.tenant, Name: fleeetv1.PlanPartName(l.up.Name, 2)}, &fleeetv1.Assemblage{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "part 2 is deleted downstream")
		g.Expect(l.mirroredPart(g, 1, "r1").Spec.Syncs).To(HaveLen(1))
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
	}, timeout, poll).Should(Succeed())
}
