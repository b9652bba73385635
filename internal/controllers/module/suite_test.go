package module_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/manager"
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

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, nil, func(c *testenv.Cluster) (func(bool), error) {
		return testenv.StartManager(c, "module", func(ctx context.Context, mgr ctrl.Manager) error {
			return manager.SetupModules(ctx, mgr, manager.Options{OfflineGrace: time.Minute})
		})
	}))
}

// tenant returns a fresh tenant namespace.
func tenant(t *testing.T) string {
	return cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
}

// report plays a cluster's agent: it reports every sync of the Remote's
// current ProxyAssemblage spec in the given state.
func report(g Gomega, ns, name string, state fleeetv1.SyncState) {
	g.Eventually(func() error {
		pa := fleettest.Proxy(g, cluster.Client, ns, name)
		now := metav1.Now()
		pa.Status.ObservedGeneration = pa.Generation
		pa.Status.Syncs = nil
		for _, s := range pa.Spec.Assemblage.Syncs {
			pa.Status.Syncs = append(pa.Status.Syncs, fleeetv1.SyncStatus{
				Name: s.Name, State: state, Message: "reported " + string(state), LastTransitionTime: &now})
		}
		return cluster.Client.Status().Update(context.Background(), pa)
	}, timeout, poll).Should(Succeed())
}

// onPlans calls seen, from a watch until the test ends, with every
// ProxyAssemblage of a namespace as it is created or changed.
func onPlans(t *testing.T, ns string, seen func(*fleeetv1.ProxyAssemblage)) {
	wc, err := client.NewWithWatch(cluster.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(t.Context(), &fleeetv1.ProxyAssemblageList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if pa, ok := ev.Object.(*fleeetv1.ProxyAssemblage); ok && ev.Type != watch.Deleted {
				seen(pa)
			}
		}
	}()
}

// driveUntil plays every online cluster's agent, reporting each Remote's
// plan in the state decide gives for the tag it holds, until done holds.
func driveUntil(g Gomega, ns string, online []string, decide func(remote, tag string) fleeetv1.SyncState, done func(Gomega)) {
	driveHeld(g, ns, online, fleettest.HeldTag, decide, done)
}

// driveHeld is driveUntil deciding on what held says a plan holds ("" for
// nothing).
func driveHeld(g Gomega, ns string, online []string, held func(*fleeetv1.ProxyAssemblage) string,
	decide func(remote, tag string) fleeetv1.SyncState, done func(Gomega)) {
	g.Eventually(func(g Gomega) {
		for _, name := range online {
			pa := fleettest.Proxy(g, cluster.Client, ns, name)
			tag := held(pa)
			state := decide(name, tag)
			reported := pa.Status.ObservedGeneration == pa.Generation && len(pa.Status.Syncs) == 1 &&
				pa.Status.Syncs[0].State == state
			if tag != "" && !reported {
				report(g, ns, name, state)
			}
		}
		done(g)
	}, timeout, poll).Should(Succeed())
}
