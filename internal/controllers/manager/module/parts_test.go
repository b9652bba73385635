package module_test

import (
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

	module := func(g Gomega, name string) *fleeetv1.Module {
		m := &fleeetv1.Module{}
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, m)).To(Succeed())
		return m
	}
	// The parts are written once the manager has seen the Modules: the
	// compiler takes a plan object holding a Module's sync, on a Module's
	// event, for a Remote's plan, and would delete a part as the plan of a
	// Remote that does not exist.
	g.Eventually(func(g Gomega) {
		g.Expect(module(g, app.Name).Status.ObservedGeneration).To(Equal(app.Generation))
		g.Expect(module(g, wide.Name).Status.ObservedGeneration).To(Equal(wide.Generation))
	}, timeout, poll).Should(Succeed())
	other := func(name string) []fleeetv1.NamedSync {
		return []fleeetv1.NamedSync{{Name: name, SyncSpec: app.Spec.Sync}}
	}
	parts := fleettest.SplitPlan(g, cluster.Client, ns, "edge", map[string]fleeetv1.Compiled{
		app.Name:  {Generation: app.Generation, Revision: compile.ModuleRevision(app)},
		wide.Name: {Generation: wide.Generation, Revision: compile.ModuleRevision(wide), TooLarge: "Remote edge: 4,097 syncs"},
	}, other("zero"), other("one"), other(app.Name))
	p0, p2 := parts[0], parts[2]
	reports := 0
	reportApp := func(generation int64) {
		reports++ // each report differs, as an agent's would, so it reaches the Modules
		fleettest.ReportPart(g, cluster.Client, p2, generation, fleeetv1.SyncStatus{Name: app.Name, State: fleeetv1.SyncReady,
			Message: fmt.Sprintf("report %d", reports), LastTransitionTime: &metav1.Time{Time: time.Now().Add(-time.Hour)}})
	}
	reportApp(p2.Generation)
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
