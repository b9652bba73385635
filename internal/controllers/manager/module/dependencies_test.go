package module_test

import (
	"testing"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// A Module placed on Remotes the Module it depends on is not placed on
// says so upstream, naming them, where before only each cluster said its
// sync was Blocked: while the dependency does not exist, while it selects
// fewer Remotes, and no more once it selects them all. A dependency by
// selector names no one Module and is not judged.
func TestAModuleSaysWhereTheModuleItDependsOnIsNotPlaced(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	fleettest.NewRemote(t, cluster.Client, ns, "edge-1", map[string]string{"env": "prod"}, true)
	fleettest.NewRemote(t, cluster.Client, ns, "edge-2", map[string]string{"env": "lab"}, true)
	app := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
	app.Namespace = ns
	app.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Name: "crds"}, {Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "none"}}}}
	g.Expect(cluster.Client.Create(ctx, app)).To(Succeed())

	g.Eventually(func(g Gomega) {
		c := readyOf(g, app)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonDependencyNotPlaced))
		g.Expect(c.Message).To(Equal("spec.sync.dependsOn[crds]: Module crds does not exist, so is placed on none of 2 of the Remotes " +
			"this Module selects (edge-1, edge-2); its sync waits there until crds is placed on them"))
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(cluster.Client.List(ctx, events, client.InNamespace(ns))).To(Succeed())
		g.Expect(events.Items).To(ContainElement(And(HaveField("Regarding.Name", app.Name),
			HaveField("Reason", fleeetv1.ReasonDependencyNotPlaced), HaveField("Type", "Warning"))))
	}, timeout, poll).Should(Succeed())

	// The dependency comes, on one of the two: the other is named.
	crds := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}})
	crds.Name, crds.Namespace = "crds", ns
	g.Expect(cluster.Client.Create(ctx, crds)).To(Succeed())
	g.Eventually(func(g Gomega) string { return readyOf(g, app).Message }, timeout, poll).Should(Equal(
		"spec.sync.dependsOn[crds]: Module crds does not select 1 of the Remotes this Module selects (edge-2); " +
			"its sync waits there until crds is placed on them"))

	// It selects both: nothing is said of placement any more.
	g.Expect(testenv.Change(ctx, cluster.Client, crds, func(m *fleeetv1.Module) { m.Spec.Selector = &metav1.LabelSelector{} })).To(Succeed())
	g.Eventually(func(g Gomega) string { return readyOf(g, app).Reason }, timeout, poll).ShouldNot(Equal(fleeetv1.ReasonDependencyNotPlaced))
}
