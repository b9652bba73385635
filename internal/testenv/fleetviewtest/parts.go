package fleetviewtest

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// SplitFleet makes a tenant in cluster with one Remote, big, whose plan is
// split over two parts written by hand: part 0 holds crds, which it reports
// Ready, part 1 app, which depends on crds and reports Blocked on it. big is
// suspended, so that the compiler leaves its plan to the test, and online.
// It returns the tenant's namespace.
func SplitFleet(t *testing.T, cluster *testenv.Cluster) string {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	ns := cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	g.Expect(cluster.Client.Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"},
		Spec: fleeetv1.RemoteSpec{Suspend: true}})).To(Succeed())
	fleettest.Heartbeat(t, cluster.Client, ns, "big")
	syncs := map[string]fleeetv1.NamedSync{}
	for _, name := range []string{"crds", "app"} {
		m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
		m.Namespace, m.Name = ns, name
		if name == "app" {
			m.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Name: "crds"}}
		}
		g.Expect(cluster.Client.Create(ctx, m)).To(Succeed())
		syncs[name] = fleeetv1.NamedSync{Name: name, SyncSpec: m.Spec.Sync}
		// The parts are written once the manager has seen the Module: the
		// compiler takes a plan object holding a Module's sync, on the
		// Module's event, for a Remote's plan, and would delete a part as
		// the plan of a Remote that does not exist.
		g.Eventually(func(g Gomega) int64 {
			g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
			return m.Status.ObservedGeneration
		}, Timeout, Poll).Should(Equal(m.Generation))
	}
	parts := fleettest.SplitPlan(g, cluster.Client, ns, "big", nil,
		[]fleeetv1.NamedSync{syncs["crds"]}, []fleeetv1.NamedSync{syncs["app"]})
	fleettest.ReportPart(g, cluster.Client, parts[0], parts[0].Generation, fleeetv1.SyncStatus{Name: "crds", State: fleeetv1.SyncReady})
	fleettest.ReportPart(g, cluster.Client, parts[1], parts[1].Generation,
		fleeetv1.SyncStatus{Name: "app", State: fleeetv1.SyncBlocked, Message: "waiting for crds", BlockedBy: []string{"crds"}})
	return ns
}
