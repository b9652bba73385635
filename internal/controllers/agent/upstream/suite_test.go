package upstream_test

import (
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// mgmt and down are the management and downstream apiservers every test of
// the package shares. A test keeps to namespaces of its own in both (link
// and upstreamTo make them) and runs its own agent confined to them
// (confinedTo), so no agent of one test reads another's objects; a test that
// changes something cluster-wide (a Flux CRD, the management apiserver's
// life) puts it back before it ends.
var mgmt, down *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithClusters(m, []testenv.SharedCluster{{Name: "management", Cluster: &mgmt}, {Name: "downstream", Cluster: &down}}))
}

// confinedTo gives an agent the cache the chart gives it: its Upstreams read
// in own only, the rest in tenants only, and no Secret cached.
func confinedTo(own string, tenants ...string) func(*ctrl.Options) {
	return func(o *ctrl.Options) { agent.Confine(o, own, tenants) }
}
