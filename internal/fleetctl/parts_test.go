package fleetctl_test

import (
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetctl"
	"github.com/fleeet-dev/fleeet/internal/fleetview/fleetviewtest"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// A Remote whose plan is split over two parts is one row of the grid, with
// the syncs of both parts, each as its own part reports it; why finds a
// dependency reported by the other part.
func TestStatusAndWhyShowASplitPlanAsOneRemote(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	// Suspended from the start, so the compiler leaves its plan to the test.
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
		// Written once the manager has seen the Module: the compiler takes
		// a plan object holding a Module's sync, on a Module's event, for
		// a Remote's plan, and would delete a part as the plan of a Remote
		// that does not exist.
		g.Eventually(func(g Gomega) int64 {
			g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
			return m.Status.ObservedGeneration
		}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Equal(m.Generation))
	}
	parts := fleettest.SplitPlan(g, cluster.Client, ns, "big", nil,
		[]fleeetv1.NamedSync{syncs["crds"]}, []fleeetv1.NamedSync{syncs["app"]})
	fleettest.ReportPart(g, cluster.Client, parts[0], parts[0].Generation, fleeetv1.SyncStatus{Name: "crds", State: fleeetv1.SyncReady})
	fleettest.ReportPart(g, cluster.Client, parts[1], parts[1].Generation,
		fleeetv1.SyncStatus{Name: "app", State: fleeetv1.SyncBlocked, Message: "waiting for crds", BlockedBy: []string{"crds"}})

	// Eventually: the Remote reads offline until the manager sees its Lease.
	g.Eventually(func(g Gomega) {
		out, err := run(t, ns, "status", "-o", "json")
		g.Expect(err).NotTo(HaveOccurred(), out)
		var view fleetctl.StatusView
		g.Expect(json.Unmarshal([]byte(out), &view)).To(Succeed())
		g.Expect(view.Remotes).To(HaveLen(1))
		g.Expect(view.Remotes[0].Name).To(Equal("big"))
		g.Expect(view.Remotes[0].Cells).To(HaveKeyWithValue("crds", HaveField("State", "ready")))
		g.Expect(view.Remotes[0].Cells).To(HaveKeyWithValue("app", And(HaveField("State", "blocked"), HaveField("Version", "v1.0.0"))))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())

	out, err := run(t, ns, "why", "app", "--remote", "big")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring("plan:         holds the current version v1.0.0"))
	g.Expect(out).To(ContainSubstring("waits for:    crds — ready"))
}
