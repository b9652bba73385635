package manager_test

import (
	"context"
	"fmt"
	"os"
	"sync"
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
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/manager"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
)

var cluster *testenv.Cluster

// managerNamespace holds user policy ConfigMaps; the webhook never judges it.
const managerNamespace = "fleeet-system"

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, []testenv.ClusterOption{testenv.WithWebhooks()}, startManager))
}

// startManager runs the fleet-manager's controllers in-process, shared by
// every test of the package.
func startManager(c *testenv.Cluster) (func(bool), error) {
	if err := c.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}); err != nil {
		return nil, err
	}
	return testenv.StartManager(c, "fleet-manager", func(ctx context.Context, mgr ctrl.Manager) error {
		return manager.Setup(ctx, mgr, manager.Options{
			OfflineGrace: time.Minute, PushTimeout: 5 * time.Second, PushPoll: time.Second,
			Management: credential.Management{URL: c.Config.Host, CABundle: c.Config.CAData},
			Namespace:  managerNamespace,
		})
	})
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

func newRemote(t *testing.T, ns, name string, labels map[string]string, online bool) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(cluster.Client.Create(t.Context(), &fleeetv1.Remote{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
	})).To(Succeed())
	if online {
		now := metav1.NewMicroTime(time.Now())
		g.Expect(cluster.Client.Create(t.Context(), &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), RenewTime: &now},
		})).To(Succeed())
	}
}

func newModule(tag string, selector *metav1.LabelSelector) *fleeetv1.Module {
	return &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: map[string]string{"tier": "app"}},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: selector,
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: tag}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy"}},
			},
		}},
	}
}

// heldTag returns the tag of the app sync a Remote's ProxyAssemblage holds, or "".
func heldTag(pa *fleeetv1.ProxyAssemblage) string {
	for _, s := range pa.Spec.Assemblage.Syncs {
		if s.Name == "app" {
			return s.Source.Git.Tag
		}
	}
	return ""
}

func proxy(g Gomega, ns, name string) *fleeetv1.ProxyAssemblage {
	pa := &fleeetv1.ProxyAssemblage{}
	g.Expect(cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pa)).To(Succeed())
	return pa
}

// report plays a cluster's agent: it reports every sync of the Remote's
// current ProxyAssemblage spec in the given state.
func report(g Gomega, ns, name string, state fleeetv1.SyncState) {
	g.Eventually(func() error {
		pa := proxy(g, ns, name)
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

func TestModulesCompileIntoTheProxyAssemblagesOfSelectedRemotes(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	newRemote(t, ns, "edge-1", map[string]string{"env": "prod", "region": "eu"}, true)
	newRemote(t, ns, "edge-2", map[string]string{"env": "dev", "region": "us"}, true)
	g.Expect(cluster.Client.Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns}, Data: map[string]string{"domain": "example.com"},
	})).To(Succeed())

	m := newModule("v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}})
	m.Namespace = ns
	m.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{
		{Name: "REGION", ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "Remote", FieldPath: "/metadata/labels/region"}},
		{Name: "DOMAIN", ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "ConfigMap", Name: "fleet", FieldPath: "/data/domain"}},
		{Name: "HOST", Value: ptr.To("$(REGION).$(DOMAIN)")},
	}
	m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"host": "$(HOST)", "later": "$(DOWNSTREAM)"}
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(heldTag(proxy(g, ns, "edge-1"))).To(Equal("v1.0.0"))
		g.Expect(proxy(g, ns, "edge-2").Spec.Assemblage.Syncs).To(BeEmpty())
		sync := proxy(g, ns, "edge-1").Spec.Assemblage.Syncs[0]
		g.Expect(sync.Labels).To(Equal(map[string]string{"tier": "app"}))
		g.Expect(sync.Package.Kustomize.Substitute).To(Equal(map[string]string{
			"host": "eu.example.com", "later": "$(DOWNSTREAM)"}), "unknown names are left for the agent")
	}, timeout, poll).Should(Succeed())

	// A ConfigMap change reaches the plan.
	g.Expect(cluster.Client.Patch(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns}, Data: map[string]string{"domain": "example.org"},
	}, client.Merge)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(proxy(g, ns, "edge-1").Spec.Assemblage.Syncs[0].Package.Kustomize.Substitute).
			To(HaveKeyWithValue("host", "eu.example.org"))
	}, timeout, poll).Should(Succeed())

	// Relabelling moves the sync from one Remote's plan to the other's.
	for name, env := range map[string]string{"edge-1": "dev", "edge-2": "prod"} {
		r := &fleeetv1.Remote{}
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, r)).To(Succeed())
		r.Labels["env"] = env
		g.Expect(cluster.Client.Update(t.Context(), r)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		g.Expect(proxy(g, ns, "edge-1").Spec.Assemblage.Syncs).To(BeEmpty())
		g.Expect(proxy(g, ns, "edge-2").Spec.Assemblage.Syncs).To(HaveLen(1))
		g.Expect(proxy(g, ns, "edge-2").Spec.Assemblage.Syncs[0].Package.Kustomize.Substitute).
			To(HaveKeyWithValue("host", "us.example.org"))
	}, timeout, poll).Should(Succeed())

	// A binding that cannot be resolved is reported, and the plan keeps what it had.
	g.Eventually(func() error {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		m.Spec.ControlPlaneBindings[1].ObjectFieldRef.FieldPath = "/data/missing"
		m.Spec.Sync.Source.Git.Tag = "v2.0.0"
		return cluster.Client.Update(t.Context(), m)
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		ready := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal("BindingFailed"))
		g.Expect(ready.Message).To(ContainSubstring("remote edge-2: spec.controlPlaneBindings[DOMAIN]: ConfigMap fleet: field /data/missing not found"))
	}, timeout, poll).Should(Succeed())
	g.Expect(heldTag(proxy(g, ns, "edge-2"))).To(Equal("v1.0.0"))
	// The compiler's stamp is where the Module controller read that from.
	stamp := proxy(g, ns, "edge-2").CompiledSyncs()["app"]
	g.Expect(stamp.Generation).To(Equal(m.Generation))
	g.Expect(stamp.Pending).To(BeTrue())
	g.Expect(stamp.BindingError).To(ContainSubstring("field /data/missing not found"))
}

// rolloutWatch watches every ProxyAssemblage of a namespace for the whole
// test and records violations: more than maxUnavailable Remotes holding a
// version they have not reported Ready, or a Remote moving backward.
type rolloutWatch struct {
	mu         sync.Mutex
	order      map[string]int // tag → position in the sequence of versions
	online     map[string]bool
	held       map[string]string
	violations []string
	peak       int
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

func watchRollout(t *testing.T, ns string, online []string, maxUnavailable int, tags ...string) *rolloutWatch {
	rw := &rolloutWatch{order: map[string]int{}, held: map[string]string{}, online: map[string]bool{}}
	for _, name := range online {
		rw.online[name] = true
	}
	for i, tag := range tags {
		rw.order[tag] = i
	}
	unready := map[string]bool{}
	onPlans(t, ns, func(pa *fleeetv1.ProxyAssemblage) {
		rw.mu.Lock()
		defer rw.mu.Unlock()
		tag := heldTag(pa)
		if prev := rw.held[pa.Name]; prev != "" && rw.order[tag] < rw.order[prev] {
			rw.violations = append(rw.violations, fmt.Sprintf("%s moved back from %s to %s", pa.Name, prev, tag))
		}
		rw.held[pa.Name] = tag
		if !rw.online[pa.Name] {
			return // offline Remotes never count as unavailable
		}
		reported := pa.Status.ObservedGeneration == pa.Generation && len(pa.Status.Syncs) > 0 &&
			pa.Status.Syncs[0].State == fleeetv1.SyncReady
		unready[pa.Name] = tag != "" && !reported
		n := 0
		for _, u := range unready {
			if u {
				n++
			}
		}
		rw.peak = max(rw.peak, n)
		if n > maxUnavailable {
			rw.violations = append(rw.violations, fmt.Sprintf("%d Remotes unavailable at once", n))
		}
	})
	return rw
}

func (rw *rolloutWatch) check(g Gomega) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	g.Expect(rw.violations).To(BeEmpty())
}

// driveUntil plays every online cluster's agent, reporting each Remote's
// plan in the state decide gives, until done holds.
func driveUntil(g Gomega, ns string, online []string, decide func(remote, tag string) fleeetv1.SyncState, done func(Gomega)) {
	g.Eventually(func(g Gomega) {
		for _, name := range online {
			pa := proxy(g, ns, name)
			tag := heldTag(pa)
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

func moduleStatus(g Gomega, ns string) *fleeetv1.Module {
	m := &fleeetv1.Module{}
	g.Expect(cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "app"}, m)).To(Succeed())
	return m
}

func TestRollingUpdateNeverExceedsMaxUnavailable(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	online := []string{"r1", "r2", "r3", "r4", "r5"}
	for _, name := range online {
		newRemote(t, ns, name, map[string]string{"fleet": "yes"}, true)
	}
	newRemote(t, ns, "r6-offline", map[string]string{"fleet": "yes"}, false)

	m := newModule("v1", &metav1.LabelSelector{})
	m.Namespace = ns
	m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())

	ready := func(string, string) fleeetv1.SyncState { return fleeetv1.SyncReady }
	// First placement: every Remote gets v1 (nothing runs yet, nothing to lose).
	driveUntil(g, ns, online, ready, func(g Gomega) {
		s := moduleStatus(g, ns).Status.Summary
		g.Expect(s.Ready).To(Equal(int32(5)))
		g.Expect(s.Offline).To(Equal(int32(1)))
	})
	// From here on, every version change is a rollout the watch holds to its bound.
	rw := watchRollout(t, ns, online, 1, "v1", "v2", "v3", "v4")

	setTag := func(tag string) {
		g.Eventually(func() error {
			m := moduleStatus(g, ns)
			m.Spec.Sync.Source.Git.Tag = tag
			return cluster.Client.Update(t.Context(), m)
		}, timeout, poll).Should(Succeed())
	}

	// v2, superseded by v3 once two Remotes run v2.
	setTag("v2")
	driveUntil(g, ns, online, ready, func(g Gomega) {
		n := 0
		for _, name := range online {
			if heldTag(proxy(g, ns, name)) == "v2" {
				n++
			}
		}
		g.Expect(n).To(BeNumerically(">=", 2))
	})
	setTag("v3")
	// r1 fails on v3: the rollout pauses and goes no further.
	fails := func(remote, tag string) fleeetv1.SyncState {
		if tag == "v3" && remote == "r1" {
			return fleeetv1.SyncFailed
		}
		return fleeetv1.SyncReady
	}
	driveUntil(g, ns, online, fails, func(g Gomega) {
		m := moduleStatus(g, ns)
		paused := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)
		g.Expect(paused).NotTo(BeNil())
		g.Expect(paused.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(paused.Message).To(HavePrefix("Remote r1 failed on v3"))
		g.Expect(m.Status.Rollout.PausedBy).To(Equal("r1"))
		g.Expect(m.Status.Rollout.Admitted).To(BeEmpty(), "no Remote is admitted while the rollout is paused")
	})

	// r1 repaired: the rollout resumes and every online Remote reaches v3.
	driveUntil(g, ns, online, ready, func(g Gomega) {
		m := moduleStatus(g, ns)
		g.Expect(apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)).To(BeNil())
		for _, name := range online {
			g.Expect(heldTag(proxy(g, ns, name))).To(Equal("v3"), "Remote %s", name)
		}
	})

	// A newer version; everything online converges, then the offline Remote gets it too.
	setTag("v4")
	driveUntil(g, ns, online, ready, func(g Gomega) {
		m := moduleStatus(g, ns)
		g.Expect(m.Status.Summary.Ready).To(Equal(int32(5)))
		g.Expect(heldTag(proxy(g, ns, "r6-offline"))).To(Equal("v4"))
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue())
		g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))
		g.Expect(apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)).To(BeNil())
		g.Expect(m.Status.Version).To(Equal("v4"))
	})
	rw.check(g)
	rw.mu.Lock()
	defer rw.mu.Unlock()
	g.Expect(rw.peak).To(Equal(1), "the watch saw the rollout move one Remote at a time")
}

func TestPullRemoteHealthFollowsItsLease(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	newRemote(t, ns, "fresh", nil, true)
	newRemote(t, ns, "silent", nil, false)
	stale := metav1.NewMicroTime(time.Now().Add(-10 * time.Minute))
	newRemote(t, ns, "stale", nil, false)
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
	down := testenv.StartCluster(t, "downstream")
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
	m := newModule("v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"mode": "push"}})
	m.Namespace = ns
	m.Spec.Sync.Source.Git.URL = url
	m.Spec.Sync.Package.Kustomize.TargetNamespace = ns
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())

	g.Eventually(func(g Gomega) {
		m := moduleStatus(g, ns)
		g.Expect(m.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 2, Updated: 2, Ready: 1, Offline: 1}))
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue(),
			"the unreachable cluster does not hold the others back")

		pa := proxy(g, ns, "edge-push")
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
	down := testenv.StartCluster(t, "downstream")
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
	newRemote(t, ns, "pulled", map[string]string{"bootstrap": "yes"}, true)

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
	families, err := ctrlmetrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

func TestACompileThatChangesNothingWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	newRemote(t, ns, "steady", map[string]string{"env": "prod"}, true)
	m := newModule("v1.0.0", &metav1.LabelSelector{})
	m.Namespace = ns
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	var before *fleeetv1.ProxyAssemblage
	g.Eventually(func(g Gomega) {
		before = proxy(g, ns, "steady")
		g.Expect(heldTag(before)).To(Equal("v1.0.0"))
	}, timeout, poll).Should(Succeed())

	// Any Remote change recompiles its plan; this one changes nothing in it.
	count := reconciles(g, "proxyassemblage-compiler")
	g.Expect(cluster.Client.Patch(t.Context(), &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{
		Name: "steady", Namespace: ns, Annotations: map[string]string{"touched": "yes"}}}, client.Merge)).To(Succeed())
	g.Eventually(func(g Gomega) float64 { return reconciles(g, "proxyassemblage-compiler") }, timeout, poll).
		Should(BeNumerically(">", count))
	g.Expect(proxy(g, ns, "steady").ResourceVersion).To(Equal(before.ResourceVersion))
}

// TestSuspendHoldsWhatRuns: a suspended Module keeps every plan at the
// version it had, and a suspended Remote keeps its plan as it is while the
// rollout passes it by; clearing either catches up.
func TestSuspendHoldsWhatRuns(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	newRemote(t, ns, "running", map[string]string{"env": "prod"}, true)
	newRemote(t, ns, "held", map[string]string{"env": "prod"}, true)
	m := newModule("v1.0.0", &metav1.LabelSelector{})
	m.Namespace = ns
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	tags := func(g Gomega) []string {
		return []string{heldTag(proxy(g, ns, "held")), heldTag(proxy(g, ns, "running"))}
	}
	g.Eventually(tags, timeout, poll).Should(Equal([]string{"v1.0.0", "v1.0.0"}))

	setSuspend := func(obj client.Object, suspend bool) {
		patch := []byte(fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend))
		g.Expect(cluster.Client.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	}
	setVersion := func(tag string) {
		patch := []byte(fmt.Sprintf(`{"spec":{"sync":{"source":{"git":{"tag":%q}}}}}`, tag))
		g.Expect(cluster.Client.Patch(t.Context(), m, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	}

	// A suspended Module: a new version reaches no plan, and says why.
	setSuspend(m, true)
	setVersion("v2.0.0")
	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		ready := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal("Suspended"))
		g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))
	}, timeout, poll).Should(Succeed())
	g.Consistently(tags, 3*time.Second, poll).Should(Equal([]string{"v1.0.0", "v1.0.0"}))

	// A suspended Remote: the resumed Module reaches every other Remote.
	setSuspend(&fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held"}}, true)
	setSuspend(m, false)
	g.Eventually(tags, timeout, poll).Should(Equal([]string{"v1.0.0", "v2.0.0"}))
	report(g, ns, "running", fleeetv1.SyncReady)
	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 2, Updated: 1, Ready: 1, Suspended: 1}))
	}, timeout, poll).Should(Succeed())
	g.Consistently(tags, 3*time.Second, poll).Should(Equal([]string{"v1.0.0", "v2.0.0"}))

	// Resumed, it catches up.
	setSuspend(&fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held"}}, false)
	g.Eventually(tags, timeout, poll).Should(Equal([]string{"v2.0.0", "v2.0.0"}))
}

func TestAPlanEditedByHandIsRestored(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	newRemote(t, ns, "edited", map[string]string{"env": "prod"}, true)
	m := newModule("v1.0.0", &metav1.LabelSelector{})
	m.Namespace = ns
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(heldTag(proxy(g, ns, "edited"))).To(Equal("v1.0.0")) }, timeout, poll).Should(Succeed())

	// The compiler ignores the echo of its own writes, not anyone else's.
	g.Eventually(func(g Gomega) error {
		pa := proxy(g, ns, "edited")
		pa.Spec.Assemblage.Syncs[0].Source.Git.Tag = "v0.9.0"
		return cluster.Client.Update(t.Context(), pa)
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(heldTag(proxy(g, ns, "edited"))).To(Equal("v1.0.0")) }, timeout, poll).Should(Succeed())
}
