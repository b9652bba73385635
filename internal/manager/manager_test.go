package manager_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/manager"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
)

// cluster is the management apiserver every test of the package shares,
// with the manager running against it; downstream is the cluster every test
// needing one delivers to, each into namespaces of its own, running its own
// agent and Flux while it lasts.
var cluster, downstream *testenv.Cluster

// replicaCluster is the management apiserver shared by the tests that run
// fleet-manager replicas as processes, each test in a manager namespace of
// its own: no in-process manager runs against it, which would serve the
// webhook and reconcile everything itself.
var replicaCluster *testenv.Cluster

// managerNamespace holds user policy ConfigMaps; the webhook never judges it.
const managerNamespace = "fleeet-system"

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithClusters(m, []testenv.SharedCluster{
		{Name: "management", Cluster: &cluster, Options: []testenv.ClusterOption{testenv.WithWebhooks()}},
		{Name: "downstream", Cluster: &downstream},
		{Name: "replicas", Cluster: &replicaCluster, Options: []testenv.ClusterOption{testenv.WithWebhooks()}},
	}, func() (func(bool), error) { return startManager(cluster) }))
}

// startReplicas returns replicaCluster, the fleet-manager binary (built
// once for the package) and a manager namespace of the test's own, which
// the replicas it runs share for their Leases and user policies.
func startReplicas(t *testing.T) (*testenv.Cluster, string, string) {
	t.Helper()
	return replicaCluster, testenv.BuildCommand(t, "fleet-manager", testenv.TestVersion), replicaCluster.Namespace(t, "system", nil)
}

// startManager runs the fleet-manager's controllers in-process, shared by
// every test of the package.
func startManager(c *testenv.Cluster) (func(bool), error) {
	if err := c.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}); err != nil {
		return nil, err
	}
	return testenv.StartManager(c, "fleet-manager", func(ctx context.Context, mgr ctrl.Manager) error {
		managerCache = mgr.GetCache()
		return manager.Setup(ctx, mgr, manager.Options{
			OfflineGrace: time.Minute, PushTimeout: 5 * time.Second, PushPoll: time.Second,
			Management: credential.Management{URL: c.Config.Host, CABundle: c.Config.CAData},
			Namespace:  managerNamespace,
		})
	}, manager.Configure)
}

// tenant returns a fresh tenant namespace.
func tenant(t *testing.T) string {
	return tenantIn(t, cluster)
}

// tenantIn returns a fresh tenant namespace of c, allowed to deploy into
// any downstream namespace. Tests serve git and charts over plain http on
// loopback, which the sources policy allows only where the tenant
// namespace says so.
func tenantIn(t testing.TB, c *testenv.Cluster) string {
	t.Helper()
	ns := c.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	patch := []byte(`{"metadata":{"annotations":{"fleeet.dev/allow-insecure-http":"true","fleeet.dev/target-namespaces":"*"}}}`)
	if err := c.Client.Patch(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	return ns
}

func TestPullRemoteHealthFollowsItsLease(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	fleettest.NewRemote(t, cluster.Client, ns, "fresh", nil, true)
	fleettest.NewRemote(t, cluster.Client, ns, "silent", nil, false)
	stale := metav1.NewMicroTime(time.Now().Add(-10 * time.Minute))
	fleettest.NewRemote(t, cluster.Client, ns, "stale", nil, false)
	g.Expect(cluster.Client.Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "stale", Namespace: ns},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &stale},
	})).To(Succeed())

	want := map[string]string{"fresh": "HeartbeatFresh", "silent": "AwaitingAgent", "stale": "HeartbeatMissed"}
	g.Eventually(func(g Gomega) {
		for name, reason := range want {
			r := &fleeetv1.Remote{}
			g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, r)).To(Succeed())
			c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.ConnectedCondition)
			g.Expect(c).NotTo(BeNil(), name)
			g.Expect(c.Reason).To(Equal(reason), name)
			g.Expect(c.Status == metav1.ConditionTrue).To(Equal(name == "fresh"), name)
			g.Expect(r.Status.Mode).To(Equal(fleeetv1.PullMode))
			g.Expect(r.Status.ObservedGeneration).To(Equal(r.Generation))
			if name == "stale" {
				g.Expect(c.Message).To(ContainSubstring("grace period 1m0s"))
				g.Expect(r.Status.LastHeartbeatTime.Time.Unix()).To(Equal(stale.Unix()))
			}
		}
	}, timeout, poll).Should(Succeed())
}

func TestPushModeDeliversThePlanAndIsolatesAnUnreachableCluster(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	down := downstream
	testenv.StartFlux(t, down, testenv.SourceController, testenv.KustomizeController)
	testenv.RunManager(t, down, "fleet-agent", func(ctx context.Context, mgr ctrl.Manager) error {
		return agent.Setup(ctx, mgr, agent.Options{Concurrent: 2})
	})
	// Flux applies the pushed plan as the Remote's serviceAccountName, which
	// may write ConfigMaps in the tenant's downstream namespace only.
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: ns}},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: ns},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "deployer", Namespace: ns}},
		},
	} {
		g.Expect(down.Client.Create(t.Context(), obj)).To(Succeed())
	}
	git := testenv.NewGitServer(t)
	url, _ := git.Commit(t, "app", map[string]string{
		"deploy/kustomization.yaml": "resources: [configmap.yaml]\n",
		"deploy/configmap.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pushed\ndata:\n  via: push\n",
	}, "v1.0.0")

	kubeconfig, err := os.ReadFile(down.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	dead, err := clientcmd.Load(kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range dead.Clusters {
		c.Server = "https://" + testenv.FreeAddr(t) // nothing listens there
	}
	deadKubeconfig, err := clientcmd.Write(*dead)
	g.Expect(err).NotTo(HaveOccurred())
	for name, data := range map[string][]byte{"edge-push": kubeconfig, "dead": deadKubeconfig} {
		g.Expect(cluster.Client.Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig", Namespace: ns},
			Data:       map[string][]byte{"value": data},
		})).To(Succeed())
		g.Expect(cluster.Client.Create(t.Context(), &fleeetv1.Remote{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"mode": "push"}},
			Spec: fleeetv1.RemoteSpec{
				KubeconfigRef:      &fleeetv1.SecretKeyReference{Name: name + "-kubeconfig", Key: "value"},
				ServiceAccountName: "deployer",
			},
		})).To(Succeed())
	}
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"mode": "push"}})
	m.Namespace = ns
	m.Spec.Sync.Source.Git.URL = url
	m.Spec.Sync.Package.Kustomize.TargetNamespace = ns
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())

	g.Eventually(func(g Gomega) {
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
		g.Expect(m.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 2, Updated: 2, Ready: 1, Offline: 1}))
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue(),
			"the unreachable cluster does not hold the others back")

		pa := fleettest.Proxy(g, cluster.Client, ns, "edge-push")
		g.Expect(pa.Status.ObservedGeneration).To(Equal(pa.Generation))
		g.Expect(pa.Status.Syncs).To(HaveLen(1))
		g.Expect(pa.Status.Syncs[0].Revision).To(HavePrefix("v1.0.0@sha1:"))

		for name, reason := range map[string]string{"edge-push": "Pushed", "dead": "Unreachable"} {
			r := &fleeetv1.Remote{}
			g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, r)).To(Succeed())
			c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.ConnectedCondition)
			g.Expect(c).NotTo(BeNil(), name)
			g.Expect(c.Reason).To(Equal(reason), name)
			g.Expect(r.Status.Mode).To(Equal(fleeetv1.PushMode))
			if name == "dead" {
				g.Expect(c.Message).To(HavePrefix("cannot reach the cluster: "))
				g.Expect(c.Message).NotTo(ContainSubstring("BEGIN"), "no key or certificate material in status")
			}
		}
	}, 2*timeout, poll).Should(Succeed())

	var cm corev1.ConfigMap
	g.Expect(down.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "pushed"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("via", "push"))
	asm := &fleeetv1.Assemblage{}
	g.Expect(down.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: ns}, asm)).To(Succeed())
	g.Expect(asm.Spec.ServiceAccountName).To(Equal("deployer"), "the push Remote's account confines the plan downstream")
}

func TestBootstrapModuleAppliesStraightIntoPushRemotes(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	testenv.StartFlux(t, cluster, testenv.SourceController, testenv.KustomizeController)
	down := downstream
	git := testenv.NewGitServer(t)
	url, _ := git.Commit(t, "flux", map[string]string{
		"install/kustomization.yaml": "resources: [configmap.yaml]\n",
		"install/configmap.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bootstrapped\ndata:\n  by: bootstrap\n",
	}, "v2.7.0")

	kubeconfig, err := os.ReadFile(down.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cluster.Client.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-kubeconfig", Namespace: ns},
		Data:       map[string][]byte{"value": kubeconfig},
	})).To(Succeed())
	g.Expect(cluster.Client.Create(t.Context(), &fleeetv1.Remote{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns, Labels: map[string]string{"bootstrap": "yes"}},
		Spec: fleeetv1.RemoteSpec{
			KubeconfigRef:      &fleeetv1.SecretKeyReference{Name: "edge-kubeconfig", Key: "value"},
			ServiceAccountName: "deployer",
		},
	})).To(Succeed())
	// A pull Remote cannot be reached from the management cluster: never selected.
	fleettest.NewRemote(t, cluster.Client, ns, "pulled", map[string]string{"bootstrap": "yes"}, true)

	bm := &fleeetv1.BootstrapModule{
		ObjectMeta: metav1.ObjectMeta{Name: "flux", Namespace: ns},
		Spec: fleeetv1.BootstrapModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"bootstrap": "yes"}},
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: url, Tag: "v2.7.0"}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./install", TargetNamespace: "default"}},
			},
		}},
	}
	g.Expect(cluster.Client.Create(t.Context(), bm)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(bm), bm)).To(Succeed())
		g.Expect(bm.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1, Ready: 1}))
		g.Expect(apimeta.IsStatusConditionTrue(bm.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue())
		g.Expect(bm.Status.ObservedGeneration).To(Equal(bm.Generation))
		g.Expect(bm.Status.Version).To(Equal("v2.7.0"))
	}, 2*timeout, poll).Should(Succeed())
	var cm corev1.ConfigMap
	g.Expect(down.Client.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "bootstrapped"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("by", "bootstrap"))

	// Deselecting the Remote removes the Flux objects, and Flux prunes what they applied.
	g.Eventually(func() error {
		r := &fleeetv1.Remote{}
		if err := cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "edge"}, r); err != nil {
			return err
		}
		r.Labels = nil
		return cluster.Client.Update(t.Context(), r)
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		err := down.Client.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "bootstrapped"}, &cm)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "pruned downstream: %v", err)
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(bm), bm)).To(Succeed())
		g.Expect(bm.Status.Summary.Total).To(BeZero())
	}, 2*timeout, poll).Should(Succeed())
}

// reconciles reads how many reconciles a controller of the in-process manager has finished.
func reconciles(g Gomega, controller string) float64 {
	gathered, err := ctrlmetrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	families := metricFamilies{}
	for _, f := range gathered {
		families[f.GetName()] = f
	}
	total, _ := families.sum("controller_runtime_reconcile_total", "controller", controller)
	return total
}

func TestACompileThatChangesNothingWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	fleettest.NewRemote(t, cluster.Client, ns, "steady", map[string]string{"env": "prod"}, true)
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
	m.Namespace = ns
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	var before *fleeetv1.ProxyAssemblage
	g.Eventually(func(g Gomega) {
		before = fleettest.Proxy(g, cluster.Client, ns, "steady")
		g.Expect(fleettest.HeldTag(before)).To(Equal("v1.0.0"))
	}, timeout, poll).Should(Succeed())

	// Any Remote change recompiles its plan; this one changes nothing in it.
	count := reconciles(g, "proxyassemblage-compiler")
	g.Expect(cluster.Client.Patch(t.Context(), &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{
		Name: "steady", Namespace: ns, Annotations: map[string]string{"touched": "yes"}}}, client.Merge)).To(Succeed())
	g.Eventually(func(g Gomega) float64 { return reconciles(g, "proxyassemblage-compiler") }, timeout, poll).
		Should(BeNumerically(">", count))
	g.Expect(fleettest.Proxy(g, cluster.Client, ns, "steady").ResourceVersion).To(Equal(before.ResourceVersion))
}

func TestAPlanEditedByHandIsRestored(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	fleettest.NewRemote(t, cluster.Client, ns, "edited", map[string]string{"env": "prod"}, true)
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
	m.Namespace = ns
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(fleettest.HeldTag(fleettest.Proxy(g, cluster.Client, ns, "edited"))).To(Equal("v1.0.0"))
	}, timeout, poll).Should(Succeed())

	// The compiler ignores the echo of its own writes, not anyone else's.
	g.Eventually(func(g Gomega) error {
		pa := fleettest.Proxy(g, cluster.Client, ns, "edited")
		pa.Spec.Assemblage.Syncs[0].Source.Git.Tag = "v0.9.0"
		return cluster.Client.Update(t.Context(), pa)
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(fleettest.HeldTag(fleettest.Proxy(g, cluster.Client, ns, "edited"))).To(Equal("v1.0.0"))
	}, timeout, poll).Should(Succeed())
}
