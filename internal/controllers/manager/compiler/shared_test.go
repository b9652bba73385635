package compiler_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// sharedPlan is the CompiledPlan the plan of Remote r names for its
// entries, and the one it names for its stamps.
func sharedPlan(g Gomega, r *fleeetv1.Remote) (*fleeetv1.ProxyAssemblage, *fleeetv1.CompiledPlan, *fleeetv1.CompiledPlan) {
	pa := fleettest.Proxy(g, cluster.Client, r.Namespace, r.Name)
	g.ExpectWithOffset(1, pa.Spec.CompiledPlan).NotTo(BeEmpty(), "the plan names a CompiledPlan")
	g.ExpectWithOffset(1, pa.Annotations).NotTo(HaveKey(fleeetv1.CompiledAnnotation), "the stamps are in a CompiledPlan")
	entries, stamps := &fleeetv1.CompiledPlan{}, &fleeetv1.CompiledPlan{}
	g.ExpectWithOffset(1, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: r.Namespace, Name: pa.Spec.CompiledPlan}, entries)).To(Succeed())
	g.ExpectWithOffset(1, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: r.Namespace, Name: pa.Annotations[fleeetv1.CompiledPlanAnnotation]}, stamps)).To(Succeed())
	g.ExpectWithOffset(1, stamps.Spec.Entries).To(Equal(entries.Spec.Entries), "both CompiledPlans hold the part's entries")
	g.ExpectWithOffset(1, entries.Spec.Compiled).To(BeEmpty(), "the entries' CompiledPlan holds no stamps")
	return pa, entries, stamps
}

// Remotes whose agents read CompiledPlans at the same versions name one
// CompiledPlan holding the entries they share and the compiler's stamps;
// the plan keeps what is its own (the entry delivering a Secret). Resolved,
// such a plan holds what the plan of an agent one minor behind, which reads
// CompiledSyncs only, holds. A Module change that compiles to the same
// entries changes the stamps alone and leaves the plan's generation as it
// is; a version change names a new CompiledPlan, and the collector deletes
// the old ones once no plan has named them for their grace.
func TestPlansShareCompiledPlans(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	edge, edge2, behind := pullRemote(t, ns, "edge", nil), pullRemote(t, ns, "edge-2", nil), pullRemote(t, ns, "behind", nil)
	reads(t, cluster.Client, edge, compiledPlans)
	reads(t, cluster.Client, edge2, compiledPlans)
	reads(t, cluster.Client, behind, compiledSyncs)
	app := fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, nil)
	fleettest.CreateModule(t, cluster.Client, ns, "db", "v2.0.0", everyRemote, func(m *fleeetv1.Module) {
		m.Spec.Sync.Secrets = []fleeetv1.SecretDelivery{{Name: "db-creds"}}
	})
	contents := &fleettest.Contents{Reader: cluster.Client}

	var first, firstStamps *fleeetv1.CompiledPlan
	var generation int64
	g.Eventually(func(g Gomega) {
		var pa *fleeetv1.ProxyAssemblage
		pa, first, firstStamps = sharedPlan(g, edge)
		generation = pa.Generation
		g.Expect(first.Spec.Entries).To(HaveLen(1))
		g.Expect(first.Spec.Entries[0].Name).To(Equal("app"))
		g.Expect(firstStamps.Spec.Compiled).To(HaveKey("app"))
		g.Expect(firstStamps.Spec.Compiled).To(HaveKey("db"))
		g.Expect(pa.Spec.Assemblage.Syncs).To(HaveLen(1), "the plan keeps the entry delivering a Secret")
		g.Expect(pa.Spec.Assemblage.Syncs[0].Name).To(Equal("db"))
		g.Expect(pa.Spec.Assemblage.Syncs[0].Secrets).To(HaveLen(1))
		_, other, _ := sharedPlan(g, edge2)
		g.Expect(other.Name).To(Equal(first.Name), "one CompiledPlan for every Remote at the same versions")

		old := fleettest.Proxy(g, cluster.Client, ns, behind.Name)
		g.Expect(old.Spec.CompiledPlan).To(BeEmpty(), "an agent that does not read CompiledPlans gets every entry in its plan")
		g.Expect(old.Spec.Assemblage.Syncs).To(HaveLen(2))
		g.Expect(contents.Syncs(pa)).To(Equal(contents.Syncs(old)), "resolved, both plans hold the same syncs")
		g.Expect(contents.Syncs(pa)[0].Source.Git.Tag).To(Equal("v1.0.0"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// Compiled to the same entries, a new generation changes the stamps.
	g.Expect(testenv.Change(t.Context(), cluster.Client, app, func(m *fleeetv1.Module) { m.Spec.Rollout.MinReadySeconds = 5 })).To(Succeed())
	g.Eventually(func(g Gomega) {
		pa, entries, stamps := sharedPlan(g, edge)
		g.Expect(stamps.Spec.Compiled).To(HaveKeyWithValue("app", HaveField("Generation", app.Generation)))
		g.Expect(entries.Name).To(Equal(first.Name), "the entries' CompiledPlan is named on")
		g.Expect(pa.Generation).To(Equal(generation), "the plan's spec did not change")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	g.Expect(testenv.Change(t.Context(), cluster.Client, app, func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v1.1.0" })).To(Succeed())
	g.Eventually(func(g Gomega) {
		pa, entries, _ := sharedPlan(g, edge)
		g.Expect(entries.Name).NotTo(Equal(first.Name))
		g.Expect(contents.Syncs(pa)[0].Source.Git.Tag).To(Equal("v1.1.0"))
		_, other, _ := sharedPlan(g, edge2)
		g.Expect(other.Name).To(Equal(entries.Name))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	for _, gone := range []*fleeetv1.CompiledPlan{first, firstStamps} {
		g.Eventually(func() error {
			return cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(gone), &fleeetv1.CompiledPlan{})
		}).WithTimeout(timeout).WithPolling(poll).Should(Satisfy(apierrors.IsNotFound), "no plan names %s: collected after its grace", gone.Name)
	}
	g.Eventually(func() error {
		return cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: first.Spec.Entries[0].Content}, &fleeetv1.CompiledSync{})
	}).WithTimeout(timeout).WithPolling(poll).Should(Satisfy(apierrors.IsNotFound), "nor any CompiledPlan v1.0.0's content")
	g.Consistently(func(g Gomega) {
		_, entries, stamps := sharedPlan(g, edge)
		g.Expect(entries.Annotations).NotTo(HaveKey(fleeetv1.UnreferencedAnnotation))
		g.Expect(stamps.Annotations).NotTo(HaveKey(fleeetv1.UnreferencedAnnotation))
		g.Expect(plancontent.PlanName(entries)).To(Equal(entries.Name), "named by what it holds")
	}).WithTimeout(2*contentGrace).WithPolling(poll).Should(Succeed(), "what a plan names stays")
}
