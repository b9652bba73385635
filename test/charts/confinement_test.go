package charts_test

import (
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// otherTenant is the second tenant the downstream cluster registers into.
const otherTenant = "team-b"

// TestAgentChartConfinesEachTenantDownstream registers one downstream cluster
// into two tenants with the agent chart, the agent running as the chart's
// ServiceAccount and real Flux applying the plans. A tenant's Modules that
// try to write outside the tenant (into the other tenant's namespace, or a
// ClusterRoleBinding, through a Kustomization or a HelmRelease) are refused
// by the downstream apiserver, and a binding is read as the tenant's
// ServiceAccount, which the agent may only impersonate.
func TestAgentChartConfinesEachTenantDownstream(t *testing.T) {
	g := testenv.Assertions(t)
	ctx := t.Context()
	certManagerCRDs, err := testenv.CertManagerCRDDirectory()
	g.Expect(err).NotTo(HaveOccurred())
	audit := filepath.Join(t.TempDir(), "downstream.log")
	mgmt := testenv.StartCluster(t, "management", testenv.WithoutFleeetCRDs(certManagerCRDs))
	down := testenv.StartCluster(t, "downstream", testenv.WithoutFleeetCRDs(), testenv.WithAuditLog(audit))
	testenv.StartFlux(t, down, testenv.SourceController, testenv.KustomizeController, testenv.HelmController)

	managerRelease := testenv.ChartOf(t, "fleet-manager").Install(t, testenv.HelmFor(t, mgmt, managerNamespace), "fleet-manager", managerNamespace,
		map[string]any{"management": map[string]any{"url": mgmt.Config.Host, "caBundle": string(mgmt.Config.CAData)}})
	certDir, caPEM := testenv.ServingCertificate(t)
	webhookHost, webhookPort, err := net.SplitHostPort(testenv.FreeAddr(t))
	g.Expect(err).NotTo(HaveOccurred())
	webhookURL := "https://" + net.JoinHostPort(webhookHost, webhookPort) + "/validate"
	routeWebhook(t, mgmt, admissionregistrationv1.WebhookClientConfig{URL: &webhookURL, CABundle: caPEM})
	managementCA := filepath.Join(t.TempDir(), "ca.crt")
	g.Expect(os.WriteFile(managementCA, mgmt.Config.CAData, 0o600)).To(Succeed())
	manager := testenv.RunRelease(t, mgmt, managerRelease, testenv.BuildCommand(t, "fleet-manager", testenv.TestVersion),
		map[string]string{"webhook-port": webhookPort, "webhook-cert-dir": certDir, "management-ca-file": managementCA},
		"--webhook-host="+webhookHost)

	// Two tenants, each with a token; the agent chart registers into both.
	values := map[string]map[string]any{}
	for _, ns := range []string{tenant, otherTenant} {
		g.Expect(mgmt.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: map[string]string{fleeetv1.TenantLabel: "true"},
			Annotations: map[string]string{"fleeet.dev/allow-insecure-http": "true"},
		}})).To(Succeed())
		values[ns] = testenv.IssueToken(t, mgmt, &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}}, func() string { return testenv.Tail(manager.LogPath, 30) })
	}
	// What a tenant's ServiceAccount may do in its own namespace: the
	// ConfigMaps its apps are, and the Secrets Helm keeps releases in. The
	// default, admin, is an aggregated ClusterRole no controller fills here.
	g.Expect(down.Client.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-apps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"*"}}},
	})).To(Succeed())
	agentValues := values[tenant]
	agentValues["clusterName"] = "edge"
	agentValues["tenantServiceAccount"] = map[string]any{"clusterRole": "tenant-apps"}
	agentValues["tenants"] = []any{map[string]any{"token": values[otherTenant]["token"], "management": map[string]any{"namespace": otherTenant}}}
	agentRelease := testenv.ChartOf(t, "fleet-agent").Install(t, testenv.HelmFor(t, down, agentNamespace), "fleet-agent", agentNamespace, agentValues)
	agent := testenv.RunRelease(t, down, agentRelease, testenv.BuildCommand(t, "fleet-agent", testenv.TestVersion),
		map[string]string{"heartbeat-interval": "2s"})
	logs := func() string {
		return "manager:\n" + testenv.Tail(manager.LogPath, 30) + "\nagent:\n" + testenv.Tail(agent.LogPath, 30)
	}

	// Tenant team-a tries to write into team-b's namespace and to make its
	// own ServiceAccount cluster-admin, with kustomize and with Helm.
	git := testenv.NewGitServer(t)
	repo, _ := git.Commit(t, "escape", map[string]string{
		"namespace/kustomization.yaml": "resources: [configmap.yaml]\n",
		"namespace/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: escaped\n  namespace: " + otherTenant +
			"\ndata:\n  from: " + tenant + "\n",
		"cluster/kustomization.yaml": "resources: [binding.yaml]\n",
		"cluster/binding.yaml":       escalation("escaped", tenant),
		"app/kustomization.yaml":     "resources: [configmap.yaml]\n",
		"app/configmap.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  region: ${region}\n",
	}, "v1.0.0")
	chartDir := filepath.Join(t.TempDir(), "escalate")
	g.Expect(os.MkdirAll(filepath.Join(chartDir, "templates"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(chartDir, "Chart.yaml"), []byte("apiVersion: v2\nname: escalate\nversion: 0.1.0\n"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(chartDir, "templates", "binding.yaml"), []byte(escalation("escalated", tenant)), 0o644)).To(Succeed())
	charts := testenv.NewChartRepo(t, chartDir)

	kustomize := func(path, target string) fleeetv1.SyncSpec {
		return fleeetv1.SyncSpec{
			Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: repo, Tag: "v1.0.0"}},
			Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: path, TargetNamespace: target}},
		}
	}
	app := kustomize("./app", otherTenant)
	app.Package.Kustomize.Substitute = map[string]string{"region": "$(REGION)"}
	app.Bindings = []fleeetv1.Binding{{Name: "REGION", ObjectFieldRef: &fleeetv1.ObjectFieldRef{
		APIVersion: "v1", Kind: "ConfigMap", Name: "cluster-info", FieldPath: "/data/region"}}}
	modules := map[string]fleeetv1.SyncSpec{
		tenant + "/escape-namespace": kustomize("./namespace", ""),
		tenant + "/escape-cluster":   kustomize("./cluster", ""),
		tenant + "/escape-helm": {
			Source:  fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: charts.URL, Chart: "escalate", Version: "0.1.0"}},
			Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{TargetNamespace: tenant}},
		},
		otherTenant + "/app": app,
	}
	// What team-b's binding reads: its ServiceAccount may, the agent may not.
	g.Expect(down.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: otherTenant, Name: "cluster-info"},
		Data:       map[string]string{"region": "eu-west"},
	})).To(Succeed())
	for key, sync := range modules {
		ns, name, _ := strings.Cut(key, "/")
		g.Expect(mgmt.Client.Create(ctx, &fleeetv1.Module{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Selector: &metav1.LabelSelector{}, Sync: sync}},
		})).To(Succeed(), key)
	}

	refusal := `is forbidden: User "system:serviceaccount:` + tenant + `:fleeet-tenant"`
	g.Eventually(func(g Gomega) {
		states := map[string]fleeetv1.SyncStatus{}
		for _, ns := range []string{tenant, otherTenant} {
			pa := &fleeetv1.ProxyAssemblage{}
			g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, pa)).To(Succeed())
			for _, s := range pa.Status.Syncs {
				states[ns+"/"+s.Name] = s
			}
		}
		for _, name := range []string{"escape-namespace", "escape-cluster"} {
			st := states[tenant+"/"+name]
			g.Expect(st.State).To(Equal(fleeetv1.SyncFailed), "%s: %+v", name, st)
			g.Expect(st.Message).To(ContainSubstring(refusal), name)
		}
		// Helm fails before storing a release, so Flux keeps retrying it:
		// in progress, with the refusal as the last attempt's outcome.
		st := states[tenant+"/escape-helm"]
		g.Expect(st.State).To(BeElementOf(fleeetv1.SyncProgressing, fleeetv1.SyncFailed), "%+v", st)
		g.Expect(st.Message).To(ContainSubstring(refusal), "%+v", st)
		g.Expect(states[otherTenant+"/app"].State).To(Equal(fleeetv1.SyncReady), "%+v", states[otherTenant+"/app"])
	}, 3*timeout, poll).Should(Succeed(), logs)

	// Nothing escaped.
	err = down.Client.Get(ctx, client.ObjectKey{Namespace: otherTenant, Name: "escaped"}, &corev1.ConfigMap{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "team-a wrote into team-b's namespace: %v", err)
	for _, name := range []string{"escaped", "escalated"} {
		err = down.Client.Get(ctx, client.ObjectKey{Name: name}, &rbacv1.ClusterRoleBinding{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ClusterRoleBinding %s exists: %v", name, err)
	}
	// Each escape reaches the Module's kstatus in the management cluster.
	g.Eventually(func(g Gomega) {
		for _, name := range []string{"escape-namespace", "escape-cluster", "escape-helm"} {
			m := &fleeetv1.Module{}
			g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: name}, m)).To(Succeed())
			g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))
			g.Expect(m.Status.Summary.Ready).To(BeZero(), name)
			g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeFalse(), name)
			if name != "escape-helm" {
				g.Expect(m.Status.Summary.Failed).To(Equal(int32(1)), name)
			}
		}
		m := &fleeetv1.Module{}
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Namespace: otherTenant, Name: "app"}, m)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue())
	}, timeout, poll).Should(Succeed(), logs)

	// team-b's binding was read as team-b's ServiceAccount, through the
	// chart's impersonate grant, and the agent was refused nothing.
	cm := &corev1.ConfigMap{}
	g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: otherTenant, Name: "app"}, cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("region", "eu-west"))
	agentUser := "system:serviceaccount:" + agentNamespace + ":fleet-agent"
	g.Expect(impersonatedReads(t, audit, agentUser, "configmaps", otherTenant, "cluster-info")).
		To(ConsistOf("system:serviceaccount:" + otherTenant + ":fleeet-tenant"))
	_, refused := permissionsUsed(t, audit, agentUser)
	g.Expect(refused).To(BeEmpty(), "requests refused to the agent")
}

// escalation is a ClusterRoleBinding making a tenant's ServiceAccount
// cluster-admin.
func escalation(name, ns string) string {
	return "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: " + name +
		"\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\n" +
		"subjects:\n  - kind: ServiceAccount\n    name: fleeet-tenant\n    namespace: " + ns + "\n"
}

// impersonatedReads lists, from the audit log, whom user impersonated to
// read the named object successfully.
func impersonatedReads(t *testing.T, path, user, resource, ns, name string) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, ev := range testenv.AuditLog(t, path, user) {
		if ev.ImpersonatedUser != "" && ev.Verb == "get" && ev.Code == 200 && ev.Resource == resource && ev.Namespace == ns && ev.Name == name {
			seen[ev.ImpersonatedUser] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}
