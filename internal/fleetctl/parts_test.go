package fleetctl_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fleeet-dev/fleeet/internal/testenv/fleetviewtest"
)

// A Remote whose plan is split over two parts is one row of the grid, with
// the syncs of both parts, each as its own part reports it; why finds the
// dependency the other part reports.
func TestStatusAndWhyShowASplitPlanAsOneRemote(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.SplitFleet(t, cluster)
	// Eventually: the Remote reads offline until the manager sees its Lease.
	g.Eventually(func(g Gomega) {
		view := statusView(t, g, ns)
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
