package module_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// A Remote's plan split over three parts: the Module's sync sits in part 2,
// which carries its stamp and reports it; another Module left out of the
// plan for its size is stamped on part 0. The Module counts the Remote once,
// as updated, and as Ready only while part 2's report is of part 2's own
// generation.
func TestASyncInAFurtherPartCountsAsThatPartReportsIt(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	// The Remote came through a registration token, and no registration
	// controller runs here to adopt it, so the compiler leaves its plan
	// alone: the test writes the parts as the compiler writes a split plan.
	fleettest.NewRemote(t, cluster.Client, ns, "edge", map[string]string{"env": "prod", fleeetv1.RegistrationTokenLabel: "tok"}, true)
	prod := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	app, wide := fleettest.NewModule("v1.0.0", prod), fleettest.NewModule("v2.0.0", prod)
	app.Namespace, wide.Namespace, wide.Name = ns, ns, "wide"
	g.Expect(cluster.Client.Create(t.Context(), app)).To(Succeed())
	g.Expect(cluster.Client.Create(t.Context(), wide)).To(Succeed())

	part := func(k int, syncs []fleeetv1.NamedSync, stamps map[string]fleeetv1.Compiled) *fleeetv1.ProxyAssemblage {
		raw, err := json.Marshal(stamps)
		g.Expect(err).NotTo(HaveOccurred())
		pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Name: fleeetv1.PlanPartName("edge", k), Namespace: ns,
			Annotations: map[string]string{fleeetv1.CompiledAnnotation: string(raw)}}}
		pa.Spec.Assemblage.Syncs = syncs
		return pa
	}
	other := func(name string) []fleeetv1.NamedSync {
		return []fleeetv1.NamedSync{{Name: name, SyncSpec: app.Spec.Sync}}
	}
	p1 := part(1, other("one"), nil)
	p1.Spec.Assemblage.PartRevision = "r1"
	p2 := part(2, []fleeetv1.NamedSync{{Name: app.Name, SyncSpec: app.Spec.Sync}},
		map[string]fleeetv1.Compiled{app.Name: {Generation: app.Generation, Revision: compile.ModuleRevision(app)}})
	p2.Spec.Assemblage.PartRevision = "r2"
	p0 := part(0, other("zero"), map[string]fleeetv1.Compiled{wide.Name: {Generation: wide.Generation,
		Revision: compile.ModuleRevision(wide), TooLarge: "Remote edge: 4,097 syncs"}})
	p0.Spec.Assemblage.Parts = []string{"r1", "r2"}
	for _, pa := range []*fleeetv1.ProxyAssemblage{p1, p2, p0} {
		g.Expect(cluster.Client.Create(t.Context(), pa)).To(Succeed())
	}
	reports := 0
	reportApp := func(generation int64) {
		reports++ // each report differs, as an agent's would, so it reaches the Modules
		p2.Status.ObservedGeneration = generation
		p2.Status.Syncs = []fleeetv1.SyncStatus{{Name: app.Name, State: fleeetv1.SyncReady,
			Message: fmt.Sprintf("report %d", reports), LastTransitionTime: &metav1.Time{Time: time.Now().Add(-time.Hour)}}}
		g.Expect(cluster.Client.Status().Update(t.Context(), p2)).To(Succeed())
	}
	reportApp(p2.Generation)
	module := func(g Gomega, name string) *fleeetv1.Module {
		m := &fleeetv1.Module{}
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, m)).To(Succeed())
		return m
	}
	g.Eventually(func(g Gomega) {
		g.Expect(module(g, app.Name).Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1, Ready: 1}))
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		m := module(g, wide.Name)
		g.Expect(m.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1}))
		g.Expect(m.Status.Conditions).To(ContainElement(And(
			HaveField("Type", fleeetv1.ReadyCondition), HaveField("Reason", fleeetv1.ReasonPlanTooLarge),
			HaveField("Message", ContainSubstring("Remote edge: 4,097 syncs")))))
	}, timeout, poll).Should(Succeed())

	// Part 2 changes (as when another sync in it does) and its report is
	// now of an older generation: the Remote still holds the update, but is
	// not Ready with it until part 2 reports its new generation.
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(p2), p2)).To(Succeed())
	reported := p2.Generation
	p2.Spec.Assemblage.PartRevision = "r2b"
	g.Expect(cluster.Client.Update(t.Context(), p2)).To(Succeed())
	g.Expect(p2.Generation).To(BeNumerically(">", reported))
	p0.Spec.Assemblage.Parts = []string{"r1", "r2b"}
	g.Expect(cluster.Client.Update(t.Context(), p0)).To(Succeed())
	reportApp(reported)
	g.Eventually(func(g Gomega) {
		g.Expect(module(g, app.Name).Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1}))
	}, timeout, poll).Should(Succeed())
	reportApp(p2.Generation)
	g.Eventually(func(g Gomega) {
		g.Expect(module(g, app.Name).Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1, Ready: 1}))
	}, timeout, poll).Should(Succeed())
}
