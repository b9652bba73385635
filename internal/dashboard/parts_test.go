package dashboard_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fleeet-dev/fleeet/internal/testenv/fleetviewtest"
)

// A Remote whose plan is split over two parts is one row of the grid, and
// its page draws the dependency between syncs held by different parts.
func TestASplitPlanShowsAsOneRemote(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.SplitFleet(t, cluster)
	base := startDashboard(t, ns)
	g.Eventually(func(g Gomega) {
		g.Expect(rows(fetch(g, base+"/"))).To(Equal([]string{
			"Remote app @v1.0.0 crds @v1.0.0",
			"big blocked v1.0.0 ready v1.0.0",
		}))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	big := fetch(g, base+"/remotes/big")
	g.Expect(rows(big)).To(ContainElement(HavePrefix("crds ready v1.0.0")))
	g.Expect(big).To(ContainSubstring(`<line class="edge blocking"`))
	g.Expect(big).To(ContainSubstring("<title>app waits for crds</title>"))
}
