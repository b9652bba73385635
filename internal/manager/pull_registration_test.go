package manager_test

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/recovery"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// agentNamespace is where the downstream Upstreams and their Secrets live.
const agentNamespace = "fleeet-agent"

// registered is one tenant a downstream cluster registers into.
type registered struct {
	tenant   string // management namespace
	upstream string // downstream Upstream name, and namespace of its Assemblage
}

// startAgent runs the fleet-agent binary against the downstream cluster.
// These tests are about registration, not confinement: their Upstreams name no
// ServiceAccount, which the agent accepts only with --allow-unconfined-syncs
// (test/charts proves the confined setup the chart installs).
func startAgent(t testing.TB, bin string, down *testenv.Cluster, args ...string) *testenv.Process {
	t.Helper()
	health := testenv.FreeAddr(t)
	p := testenv.StartProcess(t, "fleet-agent", bin, []string{"KUBECONFIG=" + down.Kubeconfig},
		append([]string{"--health-probe-bind-address=" + health, "--metrics-bind-address=0", "--allow-unconfined-syncs"}, args...)...)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := p.WaitHTTP(ctx, "http://"+health+"/readyz"); err != nil {
		t.Fatal(err)
	}
	return p
}

// registerUpstream creates, downstream, the token Secret and the Upstream the
// agent chart would create from the token's values, for the cluster "edge".
func registerUpstream(t testing.TB, down *testenv.Cluster, e registered, values credential.AgentValues, url string) {
	t.Helper()
	NewWithT(t).Expect(down.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.upstream}})).To(Succeed())
	createUpstream(t, down, e.upstream, "edge", e.upstream, values, url)
}

// createUpstream creates the token Secret and the Upstream, named name, of
// one cluster registering as clusterName and asking for the label region=eu,
// which its token must free.
func createUpstream(t testing.TB, down *testenv.Cluster, name, clusterName, assemblageNamespace string, values credential.AgentValues, url string) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(down.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: name + "-token"},
		Data:       map[string][]byte{credential.TokenKey: []byte(values.Token)},
	})).To(Succeed())
	g.Expect(down.Client.Create(ctx, &fleeetv1.Upstream{
		ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: name},
		Spec: fleeetv1.UpstreamSpec{
			Management:          fleeetv1.ManagementEndpoint{URL: url, CABundle: values.Management.CABundle, Namespace: values.Management.Namespace},
			TokenSecretRef:      &fleeetv1.LocalObjectReference{Name: name + "-token"},
			ClusterName:         clusterName,
			Labels:              map[string]string{"region": "eu"},
			AssemblageNamespace: assemblageNamespace,
		},
	})).To(Succeed())
}

func upstreamCondition(g Gomega, down *testenv.Cluster, name, typ string) *metav1.Condition {
	up := &fleeetv1.Upstream{}
	g.Expect(down.Client.Get(context.Background(), client.ObjectKey{Namespace: agentNamespace, Name: name}, up)).To(Succeed())
	c := apimeta.FindStatusCondition(up.Status.Conditions, typ)
	g.Expect(c).NotTo(BeNil(), "%s condition of Upstream %s", typ, name)
	return c
}

// appliedData reads the ConfigMap a tenant's module applied downstream.
func appliedData(g Gomega, down *testenv.Cluster, ns string) map[string]string {
	cm := &corev1.ConfigMap{}
	g.Expect(down.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "app"}, cm)).To(Succeed())
	return cm.Data
}

func TestARegisteredClusterSyncsAndSurvivesOutagesAndRevocation(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	down := downstream
	testenv.StartFlux(t, down, testenv.SourceController, testenv.KustomizeController)
	bin := testenv.BuildCommand(t, "fleet-agent", testenv.TestVersion)
	git := testenv.NewGitServer(t)
	files := func(version string) map[string]string {
		return map[string]string{
			"deploy/kustomization.yaml": "resources: [configmap.yaml]\n",
			"deploy/configmap.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  version: " + version + "\n",
		}
	}
	repo, _ := git.Commit(t, "app", files("one"), "v1.0.0")
	git.Commit(t, "app", files("two"), "v2.0.0")

	// Two tenants; the cluster reaches the first through a proxy the test
	// cuts to make the management cluster unreachable.
	a, b := registered{tenant: tenant(t), upstream: "team-a"}, registered{tenant: tenant(t), upstream: "team-b"}
	api, err := url.Parse(cluster.Config.Host)
	g.Expect(err).NotTo(HaveOccurred())
	proxy := testenv.NewProxy(t, api.Host)
	g.Expect(down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}})).To(Succeed())
	for _, e := range []registered{a, b} {
		values := issueToken(t, e.tenant, "edge", fleeetv1.RegistrationTokenSpec{
			RemoteLabels: map[string]string{"env": "edge"}, FreeLabelKeys: []string{"region"}})
		endpoint := values.Management.URL
		if e == a {
			endpoint = "https://" + proxy.Addr
		}
		registerUpstream(t, down, e, values, endpoint)
		m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"env": "edge", "region": "eu"}})
		m.Namespace = e.tenant
		m.Spec.Sync.Source.Git.URL = repo
		m.Spec.Sync.Package.Kustomize.TargetNamespace = e.upstream
		g.Expect(cluster.Client.Create(ctx, m)).To(Succeed())
	}
	// Three more tenants' tokens can register nobody by the time the agent
	// first uses them: one expired, one revoked, one used up by another
	// cluster. Each Upstream says which, as the agent chart's README lists.
	expired := registered{tenant: tenant(t), upstream: "team-expired"}
	expiredValues := issueToken(t, expired.tenant, "edge", fleeetv1.RegistrationTokenSpec{TTL: &metav1.Duration{Duration: 2 * time.Second}})
	time.Sleep(time.Until(tokenStatus(g, expired.tenant, "edge").Status.ExpiresAt.Time))
	registerUpstream(t, down, expired, expiredValues, expiredValues.Management.URL)

	revoked := registered{tenant: tenant(t), upstream: "team-revoked"}
	revokedValues := issueToken(t, revoked.tenant, "edge", fleeetv1.RegistrationTokenSpec{})
	g.Expect(cluster.Client.Delete(ctx, &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: revoked.tenant, Name: "edge"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := as(t, revokedValues.Token).Create(ctx, registrantRemote(revoked.tenant, "edge", "edge", nil))
		g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "the deleted token's identity is gone: %v", err)
	}, timeout, poll).Should(Succeed())
	registerUpstream(t, down, revoked, revokedValues, revokedValues.Management.URL)

	usedUp := registered{tenant: tenant(t), upstream: "team-used-up"}
	usedUpValues := issueToken(t, usedUp.tenant, "edge", fleeetv1.RegistrationTokenSpec{FreeLabelKeys: []string{"region"}})
	register(t, as(t, usedUpValues.Token), usedUp.tenant, "edge", "first")
	registerUpstream(t, down, usedUp, usedUpValues, usedUpValues.Management.URL)

	agentProcess := startAgent(t, bin, down, "--heartbeat-interval=2s")
	dc, err := discovery.NewDiscoveryClientForConfig(down.Config)
	g.Expect(err).NotTo(HaveOccurred())
	info, err := dc.ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())
	kubeVersion := info.GitVersion

	// Register → Module assigned → Assemblage downstream → Flux applies it →
	// status in the Module summary.
	remotes := map[registered]*fleeetv1.Remote{}
	for _, e := range []registered{a, b} {
		g.Eventually(func(g Gomega) {
			g.Expect(appliedData(g, down, e.upstream)).To(HaveKeyWithValue("version", "one"))
			m := fleettest.ModuleStatus(g, cluster.Client, e.tenant)
			g.Expect(m.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1, Ready: 1}))
			g.Expect(upstreamCondition(g, down, e.upstream, fleeetv1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))

			r := &fleeetv1.Remote{}
			g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: e.tenant, Name: "edge"}, r)).To(Succeed())
			g.Expect(r.Labels).To(Equal(map[string]string{"env": "edge", "region": "eu", fleeetv1.RegistrationTokenLabel: "edge"}))
			g.Expect(r.Status.AgentVersion).To(Equal(testenv.TestVersion))
			g.Expect(r.Status.KubernetesVersion).To(Equal(kubeVersion))
			g.Expect(apimeta.IsStatusConditionTrue(r.Status.Conditions, fleeetv1.ConnectedCondition)).To(BeTrue())
			remotes[e] = r

			err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: e.tenant, Name: fleeetv1.RemoteIdentityName("edge")}, &corev1.Secret{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the first credential is gone once the agent connected")
		}, 3*timeout, poll).Should(Succeed())
		err := down.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: e.upstream + "-token"}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the registration token is forgotten")
		// The Remote names the recovery key whose private half only the
		// cluster holds, with its credential.
		stored := &corev1.Secret{}
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: e.upstream + "-credential"}, stored)).To(Succeed())
		key, err := recovery.DecodePrivate(stored.Data[recovery.PrivateKeyKey])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(remotes[e].Annotations).To(HaveKeyWithValue(fleeetv1.RecoveryKeyAnnotation, recovery.PublicKey(key)))
	}

	// An expired token is refused in one of three ways, by timing: its
	// identity is gone (401); admission judges the expiry; or, while the
	// identity is being deleted, the apiserver's authenticator still finds
	// its ServiceAccount in its cache but its authorizer no longer finds
	// its RoleBinding, and RBAC refuses first.
	refusals := map[registered]types.GomegaMatcher{
		expired: Or(ContainSubstring("rejected the registration token (HTTP 401): it has expired or been revoked; create a new RegistrationToken"),
			ContainSubstring("RegistrationToken edge expired at"),
			And(HavePrefix("the management cluster refused the registration: "), ContainSubstring(`cannot create resource "remotes"`))),
		revoked: HavePrefix("the management cluster rejected the registration token (HTTP 401): it has expired or been revoked; create a new RegistrationToken"),
		usedUp: And(HavePrefix("the management cluster refused the registration: "),
			ContainSubstring("RegistrationToken edge is used up: 1 of 1 registrations")),
	}
	g.Eventually(func(g Gomega) {
		logged, err := os.ReadFile(agentProcess.LogPath)
		g.Expect(err).NotTo(HaveOccurred())
		for e, message := range refusals {
			c := upstreamCondition(g, down, e.upstream, fleeetv1.RegisteredCondition)
			g.Expect(c.Reason).To(Equal("RegistrationRefused"), "Upstream %s", e.upstream)
			g.Expect(c.Message).To(message, "Upstream %s", e.upstream)
			g.Expect(strings.Split(string(logged), "\n")).To(ContainElement(And(ContainSubstring("Registration refused"), ContainSubstring(`"name":%q`, e.upstream))))
		}
	}, timeout, poll).Should(Succeed())
	logged, err := os.ReadFile(agentProcess.LogPath)
	g.Expect(err).NotTo(HaveOccurred())
	for _, values := range []credential.AgentValues{expiredValues, revokedValues, usedUpValues} {
		g.Expect(string(logged)).NotTo(ContainSubstring(values.Token), "no log repeats a token")
	}

	// The management cluster becomes unreachable mid-rollout: the agent keeps
	// the last plan, deletes nothing, says so, and resumes without
	// registering again when it is back.
	proxy.Cut()
	g.Eventually(func(g Gomega) {
		c := upstreamCondition(g, down, a.upstream, fleeetv1.ConnectedCondition)
		g.Expect(c.Reason).To(Equal("Unreachable"))
		g.Expect(c.Message).To(ContainSubstring("keeping the last plan"))
	}, timeout, poll).Should(Succeed())
	bump(t, a.tenant, "v2.0.0")
	g.Consistently(func(g Gomega) {
		g.Expect(appliedData(g, down, a.upstream)).To(HaveKeyWithValue("version", "one"))
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: a.upstream, Name: a.upstream}, &fleeetv1.Assemblage{})).To(Succeed())
		g.Expect(upstreamCondition(g, down, b.upstream, fleeetv1.ConnectedCondition).Status).To(Equal(metav1.ConditionTrue), "the other tenant is unaffected")
	}, 20*time.Second, time.Second).Should(Succeed())
	g.Expect(proxy.Restore()).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(upstreamCondition(g, down, a.upstream, fleeetv1.ConnectedCondition).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(appliedData(g, down, a.upstream)).To(HaveKeyWithValue("version", "two"))
		g.Expect(fleettest.ModuleStatus(g, cluster.Client, a.tenant).Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1, Ready: 1}))
	}, 3*timeout, poll).Should(Succeed())
	tok := tokenStatus(g, a.tenant, "edge")
	g.Expect(tok.Status.Registered).To(HaveLen(1), "no second registration")
	g.Expect(tok.Status.Registered[0].UID).To(Equal(remotes[a].UID))

	// The management apiserver itself stops for a while and comes back:
	// every tenant rides it out without deleting or registering anything.
	stopping := time.Now()
	g.Expect(cluster.StopAPIServer()).To(Succeed())
	t.Logf("the management apiserver took %s to stop", time.Since(stopping))
	g.Eventually(func(g Gomega) {
		for _, e := range []registered{a, b} {
			g.Expect(upstreamCondition(g, down, e.upstream, fleeetv1.ConnectedCondition).Reason).To(Equal("Unreachable"))
		}
	}, timeout, poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		for _, e := range []registered{a, b} {
			g.Expect(appliedData(g, down, e.upstream)).To(HaveKey("version"))
			g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: e.upstream, Name: e.upstream}, &fleeetv1.Assemblage{})).To(Succeed())
		}
	}, 30*time.Second, time.Second).Should(Succeed())
	g.Expect(cluster.StartAPIServer()).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, e := range []registered{a, b} {
			g.Expect(upstreamCondition(g, down, e.upstream, fleeetv1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(tokenStatus(g, e.tenant, "edge").Status.Registered).To(HaveLen(1), "no second registration")
		}
	}, 3*timeout, poll).Should(Succeed())

	// A restarted agent keeps its credential and renews it at 80% of its
	// lifetime: here the stored expiry is moved close so renewal is due.
	// The agent now mints tokens of an hour, which the manager admits.
	g.Expect(agentProcess.Stop(30 * time.Second)).To(Succeed())
	stored := &corev1.Secret{}
	credKey := client.ObjectKey{Namespace: agentNamespace, Name: a.upstream + "-credential"}
	g.Expect(down.Client.Get(ctx, credKey, stored)).To(Succeed())
	old := string(stored.Data[credential.TokenKey])
	stored.Data[credential.ExpiresAtKey] = []byte(time.Now().Add(10 * time.Second).UTC().Format(time.RFC3339))
	g.Expect(down.Client.Update(ctx, stored)).To(Succeed())
	startAgent(t, bin, down, "--heartbeat-interval=2s", "--credential-lifetime=1h")
	g.Eventually(func(g Gomega) {
		g.Expect(down.Client.Get(ctx, credKey, stored)).To(Succeed())
		g.Expect(string(stored.Data[credential.TokenKey])).NotTo(Equal(old))
		renewed, err := credential.TokenFromSecret(stored)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(renewed.ExpiresAt).To(BeTemporally("~", time.Now().Add(time.Hour), 2*time.Minute))
		g.Expect(upstreamCondition(g, down, a.upstream, fleeetv1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
	}, timeout, poll).Should(Succeed())

	// Revoking tenant b's cluster stops its sync and deletes nothing. The
	// manager sees the deletion through its watches, which client-go
	// re-establishes with backoff after the apiserver restart above: under
	// load that took 80 s in one CI run, so this waits as long as the other
	// steps after the restart.
	g.Expect(cluster.Client.Delete(ctx, remotes[b])).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := upstreamCondition(g, down, b.upstream, fleeetv1.RegisteredCondition)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal("Revoked"))
		g.Expect(c.Message).To(ContainSubstring("nothing downstream was deleted"))
	}, 3*timeout, poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(appliedData(g, down, b.upstream)).To(HaveKeyWithValue("version", "one"))
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: b.upstream, Name: b.upstream}, &fleeetv1.Assemblage{})).To(Succeed())
		g.Expect(upstreamCondition(g, down, a.upstream, fleeetv1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
	}, 10*time.Second, time.Second).Should(Succeed())
}

// bump moves the tenant's app Module to another tag.
func bump(t *testing.T, ns, tag string) {
	t.Helper()
	m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	NewWithT(t).Expect(testenv.Change(t.Context(), cluster.Client, m, func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = tag })).To(Succeed())
}
