package compiler_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/compiler"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/content"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
	// maxPlanBytes is the compiler's plan size limit, small enough for a
	// test to pass it with one Module.
	maxPlanBytes = 16 << 10
)

// cluster is the management apiserver every test of the package shares,
// with the compiler running against it. No Module controller runs, so
// tests write a Module's rollout status themselves, and no admission
// webhook, so tests may write plans by hand.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, nil, func(c *testenv.Cluster) (func(bool), error) {
		return testenv.StartManager(c, "compiler", setupCompiler)
	}))
}

// contentGrace is how long the collector keeps a CompiledSync no plan
// names, short enough for a test to see it go.
const contentGrace = 2 * time.Second

// setupCompiler registers the compiler and the collector of its
// CompiledSyncs as the manager does.
func setupCompiler(ctx context.Context, mgr ctrl.Manager) error {
	if err := (&content.Collector{Client: mgr.GetClient(), Grace: contentGrace}).SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	return (&compiler.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-manager"), Concurrent: 2,
		MaxPlanBytes: maxPlanBytes}).SetupWithManager(ctx, mgr)
}

// tenant returns a fresh tenant namespace.
func tenant(t *testing.T) string {
	return cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
}

// pullRemote creates a pull Remote, as registration leaves it.
func pullRemote(t *testing.T, ns, name string, labels map[string]string) *fleeetv1.Remote {
	t.Helper()
	r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	NewWithT(t).Expect(cluster.Client.Create(t.Context(), r)).To(Succeed())
	return r
}

// get reads obj afresh from the apiserver.
func get(g Gomega, obj client.Object) {
	g.ExpectWithOffset(1, cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
}

// warnings returns the notes of the Warning events with reason about the
// object of kind and name in c's namespace ns.
func warnings(g Gomega, c client.Client, ns, kind, name, reason string) []string {
	list := &eventsv1.EventList{}
	g.ExpectWithOffset(1, c.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Type == "Warning" && e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}
