// Package fleetviewtest makes the fleets that the tests of fleetctl and the
// dashboard show, in a real management cluster with the manager running:
// RunWithManager starts both for a test binary, Fleet makes a small tenant
// whose clusters it plays, BenchFleet a large one.
package fleetviewtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/manager"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// Timeout and Poll are how long, and how often, the tests wait for the
// manager and the fleet's clusters to settle.
const (
	Timeout = time.Minute
	Poll    = 200 * time.Millisecond
)

// BenchRemotes is how many Remotes the benchmarks' fleets have.
const BenchRemotes = 1000

// RunWithManager runs the tests of m with a management cluster, its
// webhooks and the fleet-manager in-process, stored in *cluster, and
// returns their exit code.
func RunWithManager(m *testing.M, cluster **testenv.Cluster) int {
	return testenv.RunWithCluster(m, "management", cluster, []testenv.ClusterOption{testenv.WithWebhooks()},
		func(c *testenv.Cluster) (func(bool), error) {
			if err := c.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleeet-system"}}); err != nil {
				return nil, err
			}
			return StartManager(c, ManagerOptions(c))
		})
}

// AgentChart is the fleet-agent chart the tests' manager says the fleet
// was released with.
const AgentChart = "oci://registry.example.com/fleeet/charts/fleet-agent --version 1.2.3"

// ManagerOptions are the options the tests' fleet-manager runs with on c.
func ManagerOptions(c *testenv.Cluster) manager.Options {
	return manager.Options{
		OfflineGrace: time.Hour, PushTimeout: 5 * time.Second, PushPoll: time.Second,
		Management: credential.Management{URL: c.Config.Host, CABundle: c.Config.CAData},
		AgentChart: AgentChart,
		Namespace:  "fleeet-system",
	}
}

// StartManager runs the fleet-manager in-process on c with o.
func StartManager(c *testenv.Cluster, o manager.Options) (stop func(failed bool), err error) {
	return testenv.StartManager(c, "fleet-manager", func(ctx context.Context, mgr ctrl.Manager) error {
		return manager.Setup(ctx, mgr, o)
	})
}

// Fleet makes a tenant in cluster with three Remotes and two Modules, and
// plays the clusters: edge-1 runs crds Ready with its pods ready and app
// Blocked on it, edge-2's heartbeat is two hours old, lab runs app Failed
// with a pod crash-looping. It returns the tenant's namespace.
func Fleet(t *testing.T, cluster *testenv.Cluster) string {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	ns := cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	for name, labels := range map[string]map[string]string{
		"edge-1": {"env": "edge"}, "edge-2": {"env": "edge"}, "lab": {"env": "lab"},
	} {
		g.Expect(cluster.Client.Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}})).To(Succeed())
		renewed := time.Now()
		if name == "edge-2" {
			renewed = renewed.Add(-2 * time.Hour)
		}
		g.Expect(cluster.Client.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), RenewTime: &metav1.MicroTime{Time: renewed}},
		})).To(Succeed())
	}
	module := func(name string, selector map[string]string, deps ...string) *fleeetv1.Module {
		m := &fleeetv1.Module{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
				Selector: &metav1.LabelSelector{MatchLabels: selector},
				Sync: fleeetv1.SyncSpec{
					Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/" + name + ".git", Tag: "v1.0.0"}},
					Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy", TargetNamespace: ns}},
				},
			}},
		}
		for _, d := range deps {
			m.Spec.Sync.DependsOn = append(m.Spec.Sync.DependsOn, fleeetv1.Dependency{Name: d})
		}
		return m
	}
	app := module("app", nil, "crds")
	app.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	g.Expect(cluster.Client.Create(ctx, module("crds", map[string]string{"env": "edge"}))).To(Succeed())
	g.Expect(cluster.Client.Create(ctx, app)).To(Succeed())

	report := map[string][]fleeetv1.SyncStatus{
		"edge-1": {
			{Name: "app", State: fleeetv1.SyncBlocked, Message: "waiting for crds", BlockedBy: []string{"crds"}},
			{Name: "crds", State: fleeetv1.SyncReady, Revision: "v1.0.0",
				Health: &fleeetv1.WorkloadHealth{Workloads: 1, ReadyPods: 2, DesiredPods: 2}},
		},
		"lab": {{Name: "app", State: fleeetv1.SyncFailed, Message: "kustomize build failed",
			Health: &fleeetv1.WorkloadHealth{Workloads: 1, ReadyPods: 0, DesiredPods: 2, Reason: "CrashLoopBackOff",
				Message: "Deployment web: pod web-7d9c-x4k2p: container app"}}},
	}
	for name, syncs := range report {
		g.Eventually(func(g Gomega) {
			pa := &fleeetv1.ProxyAssemblage{}
			g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pa)).To(Succeed())
			g.Expect(pa.Spec.Assemblage.Syncs).To(HaveLen(len(syncs)))
			pa.Status.ObservedGeneration = pa.Generation
			pa.Status.Syncs = syncs
			g.Expect(cluster.Client.Status().Update(ctx, pa)).To(Succeed())
		}, Timeout, Poll).Should(Succeed())
	}
	return ns
}

// BenchFleet makes a tenant in cluster with n Remotes (edge-0000…) and m
// Modules (module-00…) selecting all of them, waits until the manager has
// compiled every plan with every Module, and returns the tenant's
// namespace.
func BenchFleet(b *testing.B, cluster *testenv.Cluster, n, m int) string {
	ctx := b.Context()
	ns := cluster.Namespace(b, "bench", map[string]string{fleeetv1.TenantLabel: "true"})
	create := func(count int, obj func(int) client.Object) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 8 {
			wg.Go(func() {
				for i := range next {
					if err := cluster.Client.Create(ctx, obj(i)); err != nil {
						b.Error(err)
					}
				}
			})
		}
		for i := range count {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	create(n, func(i int) client.Object {
		return &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("edge-%04d", i)}}
	})
	create(m, func(i int) client.Object {
		name := fmt.Sprintf("module-%02d", i)
		return &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: &metav1.LabelSelector{},
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/" + name + ".git", Tag: "v1.0.0"}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy", TargetNamespace: ns}},
			},
		}}}
	})
	deadline := time.Now().Add(10 * time.Minute)
	for {
		pas := &fleeetv1.ProxyAssemblageList{}
		if err := cluster.Client.List(ctx, pas, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		done := 0
		for _, pa := range pas.Items {
			if len(pa.Spec.Assemblage.Syncs) == m {
				done++
			}
		}
		if done == n {
			return ns
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d plans compiled", done, n)
		}
		time.Sleep(time.Second)
	}
}
