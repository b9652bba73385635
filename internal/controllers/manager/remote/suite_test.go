package remote_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/compiler"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/remote"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
	// grace is the health controller's offline grace period, short so a
	// test sees a Remote go offline without waiting long.
	grace = 2 * time.Second
	// maxPlanBytes is the compiler's plan size limit, small enough for a
	// test to pass it with one Module.
	maxPlanBytes = 16 << 10
	// managerVersion is the version the health controller judges agents
	// against.
	managerVersion = "v0.4.0"
)

// cluster is the management apiserver every test of the package shares,
// with the package's three controllers running against it, the health
// controller, the delivery controller and the push controller, and the
// compiler, which writes the plans the push and delivery controllers
// follow. No Module controller runs, so tests write a Module's rollout
// status themselves, and no admission webhook, so tests may write plans by
// hand.
var cluster *testenv.Cluster

// everyRemote selects every Remote of its namespace.
var everyRemote = &metav1.LabelSelector{}

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, nil, func(c *testenv.Cluster) (func(bool), error) {
		return testenv.StartManager(c, "remote", setupRemote, func(o *ctrl.Options) { o.NewCache = secrets.NewCache })
	}))
}

// setupRemote registers the package's controllers and the compiler as the
// manager does.
func setupRemote(ctx context.Context, mgr ctrl.Manager) error {
	if err := (&compiler.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-manager"), Concurrent: 2,
		MaxPlanBytes: maxPlanBytes}).SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := (&remote.HealthReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-manager"), Grace: grace, Concurrent: 2,
		ManagerVersion: managerVersion}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&remote.DeliveryReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-manager"), Concurrent: 2}).SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	push := &remote.PushReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-manager"), Timeout: 5 * time.Second, Poll: time.Second, Concurrent: 2}
	return push.SetupWithManager(ctx, mgr)
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

// heartbeat creates or renews the Remote's Lease as its agent would, last
// renewed at renewed.
func heartbeat(t *testing.T, r *fleeetv1.Remote, renewed time.Time) {
	t.Helper()
	g := NewWithT(t)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name}}
	at := metav1.NewMicroTime(renewed)
	if err := cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(lease), lease); err != nil {
		lease.Spec.RenewTime = &at
		g.Expect(cluster.Client.Create(t.Context(), lease)).To(Succeed())
		return
	}
	lease.Spec.RenewTime = &at
	g.Expect(cluster.Client.Update(t.Context(), lease)).To(Succeed())
}

// patch merges a JSON patch into obj as the cluster administrator.
func patch(t *testing.T, obj client.Object, format string, args ...any) {
	t.Helper()
	p := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, format, args...))
	NewWithT(t).Expect(cluster.Client.Patch(t.Context(), obj, p)).To(Succeed())
}

// wholePlan reads every part of the plan of Remote r from the suite's
// apiserver (fleettest.WholePlan).
func wholePlan(g Gomega, r *fleeetv1.Remote) fleeetv1.ProxyPlan {
	return fleettest.WholePlan(g, cluster.Client, r, maxPlanBytes)
}

// get reads obj afresh from the apiserver.
func get(g Gomega, obj client.Object) {
	g.ExpectWithOffset(1, cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
}

// connected returns a Remote's Connected condition, failing when it is unset.
func connected(g Gomega, r *fleeetv1.Remote) *metav1.Condition {
	c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.ConnectedCondition)
	g.ExpectWithOffset(1, c).NotTo(BeNil(), "Connected on Remote %s: %v", r.Name, r.Status.Conditions)
	return c
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
