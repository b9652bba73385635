package upstream_test

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/registration"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/version"
)

// linked is a cluster registered without the registration round trip: in
// the management cluster its Remote, Lease, ProxyAssemblage and identity,
// holding exactly the rights the manager grants a pull cluster; downstream
// its Upstream with the identity's credential stored, and the agent
// running.
type linked struct {
	mgmt, down *testenv.Cluster
	// ns is the tenant's namespace in the management cluster; tenant is
	// the namespace the plan is mirrored into downstream.
	ns, tenant string
	// agentNS is the agent's own namespace downstream.
	agentNS  string
	plan     *fleeetv1.ProxyAssemblage
	identity *corev1.ServiceAccount
	up       *fleeetv1.Upstream
	// stopAgent stops the agent last started.
	stopAgent func()
	// serveRecovery runs the fleet manager's recovery endpoint once the
	// cluster is recoverable; stopRecovery stops the one last started.
	serveRecovery func(t *testing.T) func()
	stopRecovery  func()
	// atEnd runs a function when the test that linked the clusters ends.
	atEnd func(func())
}

const clusterName = "edge-1"

func link(t testing.TB) *linked {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	l := &linked{mgmt: mgmt, down: down, atEnd: t.Cleanup}
	l.ns = l.mgmt.Namespace(t, "team", nil)
	mc := l.mgmt.Client

	g.Expect(mc.Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: clusterName}})).To(Succeed())
	g.Expect(mc.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: clusterName}})).To(Succeed())
	l.plan = &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: clusterName}}
	l.plan.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{appSync("v1.0.0")}
	g.Expect(mc.Create(ctx, l.plan)).To(Succeed())
	l.grantIdentity(g)
	token, err := credential.Mint(ctx, mc, l.ns, l.identity.Name, time.Hour, nil)
	g.Expect(err).NotTo(HaveOccurred())

	dc := l.down.Client
	l.agentNS = l.down.Namespace(t, "agent", nil)
	l.tenant = l.down.Namespace(t, "team", nil)
	l.up = &fleeetv1.Upstream{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.agentNS, Name: "team"},
		Spec: fleeetv1.UpstreamSpec{
			Management:          fleeetv1.ManagementEndpoint{URL: l.mgmt.Config.Host, CABundle: l.mgmt.Config.CAData, Namespace: l.ns},
			ClusterName:         clusterName,
			AssemblageNamespace: l.tenant,
			ServiceAccountName:  "team",
		},
	}
	g.Expect(dc.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.agentNS, Name: l.up.Name + "-credential"}, Data: token.SecretData(),
	})).To(Succeed())
	g.Expect(dc.Create(ctx, l.up)).To(Succeed())
	l.stopAgent = l.runAgent(t)
	return l
}

// grantIdentity creates the cluster's identity in the management cluster
// with exactly the rights the manager grants a pull cluster, as the
// manager's Remote controller does.
func (l *linked) grantIdentity(g Gomega) {
	ctx, mc := context.Background(), l.mgmt.Client
	name := fleeetv1.RemoteIdentityName(clusterName)
	l.identity = &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: name}}
	g.Expect(mc.Create(ctx, l.identity)).To(Succeed())
	g.Expect(mc.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: name}, Rules: registration.RemoteRules(clusterName)})).To(Succeed())
	g.Expect(mc.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: l.ns, Name: name}},
	})).To(Succeed())
}

// runAgent starts the agent downstream; the function it returns stops it,
// as does the end of the test that linked the clusters if that has not.
func (l *linked) runAgent(t testing.TB) func() {
	t.Helper()
	stop, err := testenv.StartManager(l.down, "fleet-agent", func(ctx context.Context, mgr ctrl.Manager) error {
		return agent.Setup(ctx, mgr, agent.Options{Concurrent: 1, Heartbeat: time.Second})
	}, confinedTo(l.agentNS, l.tenant))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	var once sync.Once
	stopOnce := func() { once.Do(func() { stop(t.Failed()) }) }
	l.atEnd(stopOnce)
	return stopOnce
}

func appSync(tag string) fleeetv1.NamedSync {
	return fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: tag}},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy"}},
	}}
}

// condition returns one condition of the Upstream as it is now.
func (l *linked) condition(g Gomega, typ string) metav1.Condition {
	g.Expect(l.down.Client.Get(context.Background(), client.ObjectKeyFromObject(l.up), l.up)).To(Succeed())
	c := apimeta.FindStatusCondition(l.up.Status.Conditions, typ)
	g.Expect(c).NotTo(BeNil(), "condition %s in %+v", typ, l.up.Status)
	return *c
}

// mirroredTag is the tag of the app sync in the local Assemblage.
func (l *linked) mirroredTag(g Gomega) string {
	asm := &fleeetv1.Assemblage{}
	g.Expect(l.down.Client.Get(context.Background(), client.ObjectKey{Namespace: l.tenant, Name: l.up.Name}, asm)).To(Succeed())
	g.Expect(asm.Spec.ServiceAccountName).To(Equal("team"), "the tenant's ServiceAccount applies the plan")
	g.Expect(asm.Spec.Syncs).To(HaveLen(1))
	return asm.Spec.Syncs[0].Source.Git.Tag
}

// With only the rights the manager grants a cluster, the agent mirrors its
// plan, follows changes as they happen, renews its Lease, reports its
// versions, that it reads CompiledSyncs, and the plan's state back.
func TestALinkMirrorsThePlanAndReportsBack(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	l := link(t)
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))
	g.Eventually(func(g Gomega) {
		g.Expect(l.condition(g, fleeetv1.RegisteredCondition).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(l.condition(g, fleeetv1.ConnectedCondition).Reason).To(Equal(fleeetv1.ReasonConnected))
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
	}, timeout, poll).Should(Succeed())

	mc := l.mgmt.Client
	g.Eventually(func(g Gomega) {
		remote := &fleeetv1.Remote{}
		g.Expect(mc.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: clusterName}, remote)).To(Succeed())
		g.Expect(remote.Status.AgentVersion).To(Equal(version.Version))
		g.Expect(remote.Status.ReadsCompiledSyncs).To(BeTrue(), "the manager may name CompiledSyncs in the plan")
		g.Expect(remote.Status.ReadsCompiledPlans).To(BeTrue(), "the manager may name CompiledPlans in the plan")
		g.Expect(remote.Status.KubernetesVersion).NotTo(BeEmpty())
		pa := &fleeetv1.ProxyAssemblage{}
		g.Expect(mc.Get(ctx, client.ObjectKeyFromObject(l.plan), pa)).To(Succeed())
		g.Expect(pa.ReportedSync("app")).NotTo(BeNil(), "the cluster reports on the plan: %+v", pa.Status)
	}, timeout, poll).Should(Succeed())

	renewed := func(g Gomega) time.Time {
		lease := &coordinationv1.Lease{}
		g.Expect(mc.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: clusterName}, lease)).To(Succeed())
		g.Expect(lease.Spec.RenewTime).NotTo(BeNil())
		return lease.Spec.RenewTime.Time
	}
	var first time.Time
	g.Eventually(func(g Gomega) { first = renewed(g) }, timeout, poll).Should(Succeed())
	g.Eventually(renewed, timeout, poll).Should(BeTemporally(">", first), "the heartbeat goes on")

	g.Expect(testenv.Change(ctx, mc, l.plan, func(pa *fleeetv1.ProxyAssemblage) {
		pa.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{appSync("v1.1.0")}
	})).To(Succeed())
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.1.0"))

	// The Upstream asks for no labels, and says so: the manager then
	// removes what the registration freed. An edit is requested at once,
	// and the manager's answer shows on the Upstream.
	remote := &fleeetv1.Remote{}
	requested := func(g Gomega) map[string]string {
		g.Expect(mc.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: clusterName}, remote)).To(Succeed())
		return remote.Status.RequestedLabels
	}
	g.Eventually(requested, timeout, poll).Should(And(Not(BeNil()), BeEmpty()))
	g.Expect(testenv.Change(ctx, l.down.Client, l.up, func(up *fleeetv1.Upstream) {
		up.Spec.Labels = map[string]string{"region": "us", "tier": "core"}
	})).To(Succeed())
	g.Eventually(requested, timeout, poll).Should(Equal(map[string]string{"region": "us", "tier": "core"}))
	answer := `refused labels the cluster requests (status.requestedLabels): labels["tier"]: not a key the Remote's registration freed (region)`
	g.Expect(status.Apply(ctx, mc, remote, status.RegistrationManager, fleeetv1.RemoteStatus{Conditions: []metav1.Condition{{
		Type: fleeetv1.LabelsAppliedCondition, Status: metav1.ConditionFalse, Reason: fleeetv1.ReasonLabelsRefused,
		Message: answer, LastTransitionTime: metav1.Now()}}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := l.condition(g, fleeetv1.LabelsAppliedCondition)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonLabelsRefused))
		g.Expect(c.Message).To(Equal("the management cluster says: " + answer))
	}, timeout, poll).Should(Succeed())
}

// While the management cluster cannot be reached the agent says so and
// keeps the last plan; it reconnects by itself.
func TestAnUnreachableManagementClusterRemovesNothing(t *testing.T) {
	g := NewWithT(t)
	l := link(t)
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))

	g.Expect(l.mgmt.StopAPIServer()).To(Succeed())
	restarted := false
	t.Cleanup(func() {
		if restarted {
			return
		}
		// The package's other tests share the apiserver.
		if err := l.mgmt.StartAPIServer(); err != nil {
			t.Errorf("restarting the management apiserver: %v", err)
		}
	})
	g.Eventually(func(g Gomega) {
		g.Expect(l.condition(g, fleeetv1.ConnectedCondition).Reason).To(Equal(fleeetv1.ReasonUnreachable))
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonUnreachable))
	}, timeout, poll).Should(Succeed())
	g.Consistently(l.mirroredTag, 3*time.Second, poll).Should(Equal("v1.0.0"), "the last plan stays")

	g.Expect(l.mgmt.StartAPIServer()).To(Succeed())
	restarted = true
	g.Eventually(func(g Gomega) {
		g.Expect(l.condition(g, fleeetv1.ConnectedCondition).Reason).To(Equal(fleeetv1.ReasonConnected))
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
	}, 2*timeout, poll).Should(Succeed())
}

// A cluster whose identity is deleted upstream (fleetctl revoke) stops
// talking to the management cluster, says it was revoked, and keeps what it
// runs.
func TestARevokedClusterStopsAndKeepsItsPlan(t *testing.T) {
	g := NewWithT(t)
	l := link(t)
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))

	g.Expect(l.mgmt.Client.Delete(t.Context(), l.identity)).To(Succeed())
	g.Eventually(func(g Gomega) {
		registered := l.condition(g, fleeetv1.RegisteredCondition)
		g.Expect(registered.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(registered.Reason).To(Equal(fleeetv1.ReasonRevoked))
		g.Expect(registered.Message).To(ContainSubstring("nothing downstream was deleted"))
	}, timeout, poll).Should(Succeed())
	g.Consistently(l.mirroredTag, 3*time.Second, poll).Should(Equal("v1.0.0"), "the last plan stays")
}
