package module_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/manager"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
)

// cluster is the management apiserver every test of the package shares,
// with the controllers a Module's rollout needs running against it, wired
// as the fleet-manager wires them: the Module controller, the compiler and
// the health controller. No admission webhook runs, and no agent: the tests
// report each plan's syncs as a cluster's agent would.
var cluster *testenv.Cluster

// prometheus answers the checks of rollout stages, as the manager's
// --prometheus-url.
var prometheus *testenv.Prometheus

func TestMain(m *testing.M) {
	prometheus = testenv.NewPrometheus()
	code := testenv.RunWithCluster(m, "management", &cluster, nil, func(c *testenv.Cluster) (func(bool), error) {
		return testenv.StartManager(c, "module", func(ctx context.Context, mgr ctrl.Manager) error {
			return manager.SetupModules(ctx, mgr, manager.Options{OfflineGrace: time.Minute, PrometheusURL: prometheus.URL})
		}, func(o *ctrl.Options) { o.NewCache = secrets.NewCache })
	})
	prometheus.Close()
	os.Exit(code)
}

// tenant returns a fresh tenant namespace.
func tenant(t *testing.T) string {
	return cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
}

// heldTag is fleettest.HeldTag of pa read as its cluster reads it: the
// entries of the CompiledPlan it names and the CompiledSyncs they name,
// whole.
func heldTag(pa *fleeetv1.ProxyAssemblage) string {
	return (&fleettest.Contents{Reader: cluster.Client}).HeldTag(pa)
}

// heldTags maps each of the namespace's Remotes named to the tag its plan
// holds (heldTag).
func heldTags(g Gomega, ns string, remotes []string) map[string]string {
	tags := map[string]string{}
	for _, name := range remotes {
		tags[name] = heldTag(fleettest.Proxy(g, cluster.Client, ns, name))
	}
	return tags
}

// readsPlans says, as the agent of Remote name would, that it reads
// CompiledSyncs and CompiledPlans: its plan names what it shares with
// other Remotes' instead of holding it.
func readsPlans(g Gomega, ns, name string) {
	r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	g.Expect(cluster.Client.Status().Patch(context.Background(), r, client.RawPatch(types.MergePatchType,
		[]byte(`{"status":{"readsCompiledSyncs":true,"readsCompiledPlans":true}}`)))).To(Succeed())
}

// report plays a cluster's agent: it reports every sync of the Remote's
// current ProxyAssemblage spec in the given state.
func report(g Gomega, ns, name string, state fleeetv1.SyncState) {
	fleettest.Report(g, cluster.Client, ns, name, state)
}

// onPlans calls seen, from a watch until the test ends, with every
// ProxyAssemblage of a namespace as it is created or changed.
func onPlans(t *testing.T, ns string, seen func(*fleeetv1.ProxyAssemblage)) {
	fleettest.OnPlans(t, cluster.Config, ns, seen)
}

// driveUntil plays every online cluster's agent, reporting each Remote's
// plan in the state decide gives for the tag it holds, until done holds.
func driveUntil(g Gomega, ns string, online []string, decide func(remote, tag string) fleeetv1.SyncState, done func(Gomega)) {
	driveHeld(g, ns, online, heldTag, decide, done)
}

// driveHeld is driveUntil deciding on what held says a plan holds ("" for
// nothing).
func driveHeld(g Gomega, ns string, online []string, held func(*fleeetv1.ProxyAssemblage) string,
	decide func(remote, tag string) fleeetv1.SyncState, done func(Gomega)) {
	fleettest.DriveHeld(g, func(string) client.Client { return cluster.Client }, ns, online, held, decide, done)
}

// readyOf reads m again and returns its Ready condition.
func readyOf(g Gomega, m *fleeetv1.Module) *metav1.Condition {
	g.Expect(cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(m), m)).To(Succeed())
	c := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.ReadyCondition)
	g.Expect(c).NotTo(BeNil())
	return c
}
