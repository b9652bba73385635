// Package adversarial attacks a running fleet with the credentials an
// attacker really holds: a tenant user, a registration token, a cluster's
// own token, a policy author, a raw HTTPS client. The fleet is the real
// thing: kube-apiservers, fleet-manager and fleet-agent installed from
// their charts and running as the charts' ServiceAccounts, Flux's
// controllers downstream, a git server. Every case is a named subtest that
// logs who tried what and what came of it.
package adversarial_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	managerNamespace = "fleeet-system"
	agentNamespace   = "fleeet-system"
	// tenantA and tenantB are management namespaces and, downstream, the
	// namespaces of the same name the agent chart creates.
	tenantA = "team-a"
	tenantB = "team-b"
	// tenantC reaches the downstream cluster in push mode: the manager
	// writes its Assemblage there through a kubeconfig of the push identity
	// the agent chart's push release makes.
	tenantC = "team-c"
	// pushNamespace and pushRelease are where and as what the agent chart
	// is installed in push mode, beside the pull release: its own
	// namespace, so the two agents elect leaders apart.
	pushNamespace = "fleeet-push"
	pushRelease   = "team-c-agent"
	// tenantSA is the downstream ServiceAccount Flux impersonates for each
	// tenant, as the agent chart names it.
	tenantSA = "fleeet-tenant"
	timeout  = 2 * time.Minute
	poll     = 250 * time.Millisecond
)

// TestMain builds each command the tests run once, for all of them.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// fleet is what every attack runs against.
type fleet struct {
	mgmt, down *testenv.Cluster
	manager    *testenv.Process
	agent      *testenv.Process
	// pushAgent expands the Assemblages the manager pushes.
	pushAgent *testenv.Process
	// webhookURL and webhookCA reach the manager's admission webhook
	// directly, as any client on the network can.
	webhookURL string
	webhookCA  []byte
	git        *testenv.GitServer
	// pushKubeconfig reaches the downstream cluster as the push
	// release's ServiceAccount for the manager.
	pushKubeconfig string
	// managerMetrics, managerHealth and agentMetrics are where the manager
	// and the agent serve metrics and health, reachable by anyone on the
	// network.
	managerMetrics, managerHealth, agentMetrics string
	// recoveryURL and recoveryCA reach the manager's recovery endpoint,
	// which answers anyone on the network.
	recoveryURL string
	recoveryCA  []byte
}

func (f *fleet) logs() string {
	return "manager:\n" + testenv.Tail(f.manager.LogPath, 40) + "\nagent:\n" + testenv.Tail(f.agent.LogPath, 40) +
		"\npush agent:\n" + testenv.Tail(f.pushAgent.LogPath, 40)
}

// startFleet brings up the management cluster with fleet-manager from its
// chart and a downstream cluster with Flux and fleet-agent from its chart,
// registered into two tenants, each through its own RegistrationToken.
func startFleet(t *testing.T) *fleet {
	g := NewWithT(t)
	ctx := t.Context()
	certManagerCRDs, err := testenv.CertManagerCRDDirectory()
	g.Expect(err).NotTo(HaveOccurred())
	f := &fleet{}
	f.mgmt = testenv.StartCluster(t, "management", testenv.WithoutFleeetCRDs(certManagerCRDs))
	f.down = testenv.StartCluster(t, "downstream", testenv.WithoutFleeetCRDs())
	testenv.StartFlux(t, f.down, testenv.SourceController, testenv.KustomizeController)

	certDir, caPEM := testenv.ServingCertificate(t)
	recoveryAddr := testenv.FreeAddr(t)
	f.recoveryURL, f.recoveryCA = "https://"+recoveryAddr, caPEM
	managerRelease := testenv.ChartOf(t, "fleet-manager").Install(t, testenv.HelmFor(t, f.mgmt, managerNamespace), "fleet-manager", managerNamespace,
		map[string]any{"management": map[string]any{"url": f.mgmt.Config.Host, "caBundle": string(f.mgmt.Config.CAData)},
			"recovery": map[string]any{"enabled": true, "url": f.recoveryURL, "tls": map[string]any{"secretName": "recovery-tls"}}})
	host, port, err := net.SplitHostPort(testenv.FreeAddr(t))
	g.Expect(err).NotTo(HaveOccurred())
	f.webhookURL, f.webhookCA = "https://"+net.JoinHostPort(host, port)+"/validate", caPEM
	testenv.RouteWebhook(t, f.mgmt, "fleet-manager", admissionregistrationv1.WebhookClientConfig{URL: &f.webhookURL, CABundle: caPEM})
	managementCA := filepath.Join(t.TempDir(), "ca.crt")
	g.Expect(os.WriteFile(managementCA, f.mgmt.Config.CAData, 0o600)).To(Succeed())
	recoveryCA := filepath.Join(t.TempDir(), "recovery-ca.crt")
	g.Expect(os.WriteFile(recoveryCA, caPEM, 0o600)).To(Succeed())
	// Metrics and health on real addresses, for the serving attacks.
	f.managerMetrics, f.managerHealth, f.agentMetrics = testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	f.manager = testenv.RunRelease(t, f.mgmt, managerRelease, testenv.BuildCommand(t, "fleet-manager", testenv.TestVersion),
		map[string]string{"webhook-port": port, "webhook-cert-dir": certDir, "management-ca-file": managementCA,
			"metrics-bind-address": f.managerMetrics, "health-probe-bind-address": f.managerHealth,
			"recovery-bind-address": recoveryAddr, "recovery-cert-dir": certDir, "recovery-ca-file": recoveryCA},
		"--webhook-host="+host)

	for _, ns := range []string{tenantA, tenantB, tenantC} {
		g.Expect(f.mgmt.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: map[string]string{fleeetv1.TenantLabel: "true"},
			// Sources are served over plain http on loopback here.
			Annotations: map[string]string{"fleeet.dev/allow-insecure-http": "true"},
		}})).To(Succeed())
	}
	valuesA := f.token(t, tenantA, "edge", fleeetv1.RegistrationTokenSpec{RemoteLabels: map[string]string{"env": "edge"}})
	valuesB := f.token(t, tenantB, "edge", fleeetv1.RegistrationTokenSpec{RemoteLabels: map[string]string{"env": "edge"}})

	// Each tenant's Flux identity downstream may manage ConfigMaps in its
	// own namespace and nothing else.
	g.Expect(f.down.Client.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-apps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}},
	})).To(Succeed())
	agentValues := map[string]any{
		"token":                valuesA["token"],
		"management":           valuesA["management"],
		"clusterName":          "edge",
		"tenantServiceAccount": map[string]any{"clusterRole": "tenant-apps"},
		"tenants":              []any{map[string]any{"token": valuesB["token"], "management": map[string]any{"namespace": tenantB}}},
	}
	agentRelease := testenv.ChartOf(t, "fleet-agent").Install(t, testenv.HelmFor(t, f.down, agentNamespace), "fleet-agent", agentNamespace, agentValues)
	// The agent itself may read Secrets in team-b (an operator granted it,
	// or the namespace is one where the agent's own Role reaches); a
	// tenant's binding must still read only what that tenant may.
	g.Expect(f.down.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tenantB, Name: "agent-reads-secrets"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}}})).To(Succeed())
	g.Expect(f.down.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantB, Name: "agent-reads-secrets"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agent-reads-secrets"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentNamespace, Name: "fleet-agent"}}})).To(Succeed())
	agentBin := testenv.BuildCommand(t, "fleet-agent", testenv.TestVersion)
	f.agent = testenv.RunRelease(t, f.down, agentRelease, agentBin,
		map[string]string{"heartbeat-interval": "2s", "metrics-bind-address": f.agentMetrics})
	f.installPushRelease(t, agentBin)
	g.Eventually(func(g Gomega) {
		for _, ns := range []string{tenantA, tenantB} {
			remote := &fleeetv1.Remote{}
			g.Expect(f.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, remote)).To(Succeed())
			g.Expect(remote.Status.Conditions).To(ContainElement(And(
				HaveField("Type", fleeetv1.ConnectedCondition), HaveField("Status", metav1.ConditionTrue))))
		}
	}, 2*timeout, poll).Should(Succeed(), f.logs)
	f.git = testenv.NewGitServer(t)
	return f
}

// installPushRelease installs the agent chart in push mode for team-c, as
// a downstream admin would, runs its agent, and makes the push kubeconfig
// from the chart's ServiceAccount for the manager: it may write Assemblages
// in team-c and nothing else.
func (f *fleet) installPushRelease(t *testing.T, agentBin string) {
	rel := testenv.ChartOf(t, "fleet-agent").Install(t, testenv.HelmFor(t, f.down, pushNamespace), pushRelease, pushNamespace, map[string]any{
		"mode":                 "push",
		"management":           map[string]any{"namespace": tenantC},
		"clusterName":          "pushed",
		"tenantServiceAccount": map[string]any{"clusterRole": "tenant-apps"},
	})
	f.pushAgent = testenv.RunRelease(t, f.down, rel, agentBin, nil)
	// The chart's token Secret stays empty here (no kube-controller-manager
	// fills it in); a token of the same ServiceAccount carries its rights.
	token := testenv.ServiceAccountToken(t, f.down, pushNamespace, pushRelease+"-push")
	f.pushKubeconfig = kubeconfig(f.down.Config.Host, string(f.down.Config.CAData), "    token: "+token+"\n", "")
}

// token creates a RegistrationToken and returns the agent chart values the
// manager wrote for it.
func (f *fleet) token(t *testing.T, ns, name string, spec fleeetv1.RegistrationTokenSpec) map[string]any {
	t.Helper()
	return testenv.IssueToken(t, f.mgmt, &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}, func() string { return testenv.Tail(f.manager.LogPath, 30) })
}

// bearer is a client of c that authenticates with token and nothing else.
func bearer(t *testing.T, c *testenv.Cluster, token string) client.Client {
	t.Helper()
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = token
	cl, err := client.New(cfg, client.Options{Scheme: c.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// user is a client of c acting as a person named name who holds rules in
// each of namespaces, granted the way a platform team grants its tenants.
func user(t *testing.T, c *testenv.Cluster, name string, rules []rbacv1.PolicyRule, namespaces ...string) client.Client {
	t.Helper()
	g := NewWithT(t)
	for _, ns := range namespaces {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}
		g.Expect(c.Client.Create(t.Context(), role)).To(Succeed())
		g.Expect(c.Client.Create(t.Context(), &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
		})).To(Succeed())
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: []string{"system:authenticated"}}
	cl, err := client.New(cfg, client.Options{Scheme: c.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	return cl
}

// record is one attack's account: who tried what, and what came of it.
type record struct {
	name, identity, request, outcome string
	failed                           bool
}

// ledger collects the records and prints them as a table at the end.
type ledger struct {
	mu      sync.Mutex
	records []record
}

func (l *ledger) add(r record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
}

func (l *ledger) table() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	passed := 0
	for i, r := range l.records {
		verdict := "held"
		if r.failed {
			verdict = "BROKEN"
		} else {
			passed++
		}
		fmt.Fprintf(&b, "%3d %-6s %s\n    identity: %s\n    request:  %s\n    outcome:  %s\n", i+1, verdict, r.name, r.identity, r.request, r.outcome)
	}
	fmt.Fprintf(&b, "%d of %d attacks held\n", passed, len(l.records))
	return b.String()
}
