package assemblage_test

import (
	"context"
	"maps"
	"testing"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// writePart creates or replaces part k of first's plan, as the agent
// mirrors it: owned by part 0, carrying rev.
func (e *env) writePart(t *testing.T, first *fleeetv1.Assemblage, k int, rev string, syncs ...fleeetv1.NamedSync) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		part := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Namespace: first.Namespace, Name: fleeetv1.PlanPartName(first.Name, k)}}
		_, err := controllerutil.CreateOrUpdate(t.Context(), e.c.Client, part, func() error {
			part.Spec = fleeetv1.AssemblageSpec{Syncs: syncs, ServiceAccountName: trustedTenant, PartRevision: rev}
			return controllerutil.SetControllerReference(first, part, e.c.Client.Scheme())
		})
		return err
	}, timeout, poll).Should(Succeed())
}

// listParts makes part 0 list the further parts' revisions.
func (e *env) listParts(t *testing.T, first *fleeetv1.Assemblage, revs ...string) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		if err := e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(first), first); err != nil {
			return err
		}
		first.Spec.Parts = revs
		return e.c.Client.Update(t.Context(), first)
	}, timeout, poll).Should(Succeed())
}

// expectPartReady checks one part's status: its own syncs only, all Ready,
// for its own generation, Ready as the whole plan is.
func (e *env) expectPartReady(g Gomega, ns, name string, syncs ...string) {
	part := &fleeetv1.Assemblage{}
	g.Expect(e.c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, part)).To(Succeed())
	g.Expect(part.Status.ObservedGeneration).To(Equal(part.Generation), name)
	var got []string
	for _, s := range part.Status.Syncs {
		g.Expect(s.State).To(Equal(fleeetv1.SyncReady), "%s: %+v", name, s)
		got = append(got, s.Name)
	}
	g.Expect(got).To(ConsistOf(syncs), name)
	g.Expect(part.Status.Summary).To(Equal(fleeetv1.SyncSummary{Total: int32(len(syncs)), Ready: int32(len(syncs))}), name)
	ready := apimeta.FindStatusCondition(part.Status.Conditions, fleeetv1.ReadyCondition)
	g.Expect(ready).NotTo(BeNil(), name)
	g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), name)
	g.Expect(ready.ObservedGeneration).To(Equal(part.Generation), name)
}

// expectIncomplete checks that part 0 says the plan is not whole, naming why.
func (e *env) expectIncomplete(g Gomega, first *fleeetv1.Assemblage, why string) {
	current := &fleeetv1.Assemblage{}
	g.Expect(e.c.Client.Get(context.Background(), client.ObjectKeyFromObject(first), current)).To(Succeed())
	g.Expect(current.Status.ObservedGeneration).To(Equal(current.Generation))
	c := apimeta.FindStatusCondition(current.Status.Conditions, fleeetv1.ReconcilingCondition)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Reason).To(Equal(fleeetv1.ReasonPlanIncomplete))
	g.Expect(c.Message).To(ContainSubstring(why))
}

// uids records the UIDs of a namespace's appliers by sync.
func (e *env) uids(g Gomega, ns string) map[string]types.UID {
	out := map[string]types.UID{}
	for name, obj := range e.appliers(g, ns) {
		out[name] = obj.GetUID()
	}
	return out
}

// A plan split over three Assemblages runs as one under part 0: a sync
// waits for its dependency in another part, each part reports its own
// syncs; a part behind its listed revision stops everything from being
// applied or removed; a sync moving between parts keeps its Flux objects.
func (e *env) testSplitPlan(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "split", nil)
	e.serviceAccount(t, ns, trustedTenant, nil)
	first := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Name: "plan", Namespace: ns}, Spec: fleeetv1.AssemblageSpec{
		Syncs: []fleeetv1.NamedSync{e.ks(ns, "s1", "v1.0.0", "./configmap")}, ServiceAccountName: trustedTenant, Parts: []string{"r1", "r2"}}}
	g.Expect(e.c.Client.Create(t.Context(), first)).To(Succeed())
	g.Eventually(func(g Gomega) { e.expectIncomplete(g, first, "part 1 of 3 not read yet") }, timeout, poll).Should(Succeed())
	g.Expect(e.appliers(g, ns)).To(BeEmpty(), "nothing is applied from a plan not whole")

	e.writePart(t, first, 1, "r1", e.hr("s2", "hello", "1.2.3", "s1"))
	e.writePart(t, first, 2, "r2", e.ks(ns, "s3", "v1.0.0", "./configmap", "s2"))
	g.Eventually(func(g Gomega) {
		e.expectPartReady(g, ns, "plan", "s1")
		e.expectPartReady(g, ns, "plan.p1", "s2")
		e.expectPartReady(g, ns, "plan.p2", "s3")
	}, timeout, poll).Should(Succeed())
	objs := e.appliers(g, ns)
	g.Expect(objs).To(HaveLen(3))
	for name, obj := range objs {
		g.Expect(obj.GetLabels()).To(HaveKeyWithValue(fleeetv1.AssemblageLabel, "plan"), name)
		g.Expect(metav1.IsControlledBy(obj, first)).To(BeTrue(), "%s is owned by part 0", name)
	}
	g.Expect(objs["s2"].GetCreationTimestamp().Time).NotTo(BeTemporally("<", objs["s1"].GetCreationTimestamp().Time))
	g.Expect(objs["s3"].GetCreationTimestamp().Time).NotTo(BeTemporally("<", objs["s2"].GetCreationTimestamp().Time),
		"s3 waits for s2, in another part")
	before := e.uids(g, ns)

	// s3 moves to part 1 and part 2 gets s4 instead; part 0 still lists
	// the old revisions: nothing is applied or removed.
	e.writePart(t, first, 1, "r1b", e.hr("s2", "hello", "1.2.3", "s1"), e.ks(ns, "s3", "v1.0.0", "./configmap", "s2"))
	e.writePart(t, first, 2, "r2b", e.ks(ns, "s4", "v1.0.0", "./configmap"))
	g.Eventually(func(g Gomega) {
		e.expectIncomplete(g, first, `part 1 of 3 is at revision "r1b", the plan lists "r1"`)
	}, timeout, poll).Should(Succeed())
	g.Consistently(func(g Gomega) { g.Expect(e.uids(g, ns)).To(Equal(before)) }, "2s", poll).Should(Succeed())

	e.listParts(t, first, "r1b", "r2b")
	g.Eventually(func(g Gomega) {
		e.expectPartReady(g, ns, "plan", "s1")
		e.expectPartReady(g, ns, "plan.p1", "s2", "s3")
		e.expectPartReady(g, ns, "plan.p2", "s4")
	}, timeout, poll).Should(Succeed())
	after := e.uids(g, ns)
	g.Expect(after).To(HaveLen(4))
	for name, uid := range before {
		g.Expect(after[name]).To(Equal(uid), "%s keeps its Flux objects", name)
	}
	e.waitReady(t, first)
}

// fluxUIDs records the UIDs of a namespace's Flux objects, sources and
// appliers, by kind and sync.
func (e *env) fluxUIDs(g Gomega, ns string) map[string]types.UID {
	out := map[string]types.UID{}
	for name, uid := range e.uids(g, ns) {
		out["applier/"+name] = uid
	}
	repos := &sourcev1.GitRepositoryList{}
	g.Expect(e.c.Client.List(context.Background(), repos, client.InNamespace(ns))).To(Succeed())
	for _, repo := range repos.Items {
		out["source/"+repo.Labels[fleeetv1.SyncLabel]] = repo.UID
	}
	return out
}

// A part part 0 no longer lists leaves the plan with its syncs: their Flux
// objects go, and Flux prunes what they applied, while the syncs still in
// the plan keep theirs, untouched. A part part 0 still lists but that is
// missing, as when it is deleted before part 0 is rewritten, removes
// nothing: half a plan is never pruned.
func (e *env) testPartLeavingPlan(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := e.c.Namespace(t, "shrink", nil)
	e.serviceAccount(t, ns, trustedTenant, nil)
	first := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Name: "plan", Namespace: ns}, Spec: fleeetv1.AssemblageSpec{
		Syncs: []fleeetv1.NamedSync{e.ks(ns, "s1", "v1.0.0", "./configmap")}, ServiceAccountName: trustedTenant, Parts: []string{"r1", "r2"}}}
	g.Expect(e.c.Client.Create(ctx, first)).To(Succeed())
	e.writePart(t, first, 1, "r1", e.ks(ns, "s2", "v1.0.0", "./configmap"))
	e.writePart(t, first, 2, "r2", e.ks(ns, "s3", "v1.0.0", "./configmap"))
	g.Eventually(func(g Gomega) {
		e.expectPartReady(g, ns, "plan", "s1")
		e.expectPartReady(g, ns, "plan.p1", "s2")
		e.expectPartReady(g, ns, "plan.p2", "s3")
	}, timeout, poll).Should(Succeed())
	before := e.fluxUIDs(g, ns)
	g.Expect(before).To(HaveKey("source/s3"))
	g.Expect(before).To(HaveKey("applier/s3"))
	g.Expect(before).To(HaveLen(6), "a GitRepository and a Kustomization a sync")
	applied := client.ObjectKey{Namespace: ns, Name: "s3"} // s3's ConfigMap
	g.Expect(e.c.Client.Get(ctx, applied, &corev1.ConfigMap{})).To(Succeed())

	// Part 2 is deleted while part 0 still lists it: nothing is removed.
	part2 := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plan.p2"}}
	g.Expect(e.c.Client.Delete(ctx, part2)).To(Succeed())
	g.Eventually(func(g Gomega) { e.expectIncomplete(g, first, "part 2 of 3 not read yet") }, timeout, poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(e.fluxUIDs(g, ns)).To(Equal(before))
		g.Expect(e.c.Client.Get(ctx, applied, &corev1.ConfigMap{})).To(Succeed())
	}, "2s", poll).Should(Succeed(), "nothing is pruned from a plan not whole")

	// Part 2 is back, then part 0 lists part 1 only, as the compiler
	// shrinks a plan: part 0 first, part 2 deleted after. s3 leaves.
	e.writePart(t, first, 2, "r2", e.ks(ns, "s3", "v1.0.0", "./configmap"))
	g.Eventually(func(g Gomega) { e.expectPartReady(g, ns, "plan.p2", "s3") }, timeout, poll).Should(Succeed())
	g.Expect(e.fluxUIDs(g, ns)).To(Equal(before), "a part read again keeps its syncs' Flux objects")
	e.listParts(t, first, "r1")
	g.Eventually(func(g Gomega) {
		err := e.c.Client.Get(ctx, applied, &corev1.ConfigMap{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Flux pruned what s3 applied: %v", err)
		e.expectPartReady(g, ns, "plan", "s1")
		e.expectPartReady(g, ns, "plan.p1", "s2")
	}, timeout, poll).Should(Succeed())
	g.Expect(e.c.Client.Delete(ctx, part2)).To(Succeed())
	kept := maps.Clone(before)
	delete(kept, "source/s3")
	delete(kept, "applier/s3")
	g.Eventually(func(g Gomega) map[string]types.UID { return e.fluxUIDs(g, ns) }, timeout, poll).Should(Equal(kept),
		"s3's Flux objects are removed, s1's and s2's untouched")
	e.waitReady(t, first)
}
