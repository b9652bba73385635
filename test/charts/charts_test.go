// Package charts_test installs fleet-manager and fleet-agent with the Helm
// SDK into real apiservers, runs the binaries as the ServiceAccounts the
// charts create — with the arguments the charts' Deployments give them — and
// registers a cluster and syncs an app through them. A permission the charts
// forgot fails the scenario; the apiservers' audit logs show which of the
// granted permissions were used.
package charts_test

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	managerNamespace = "fleeet-system"
	agentNamespace   = "fleeet-system"
	tenant           = "team-a"
	timeout          = 2 * time.Minute
	poll             = 250 * time.Millisecond
)

// TestMain builds each command the tests run once, for all of them.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// frozenPolicy is a user policy given through the manager chart's values.
const frozenPolicy = "package fleeet.frozen\n\n" +
	"deny contains msg if {\n  input.object.metadata.labels.frozen == \"true\"\n" +
	"  msg := \"metadata.labels.frozen: frozen objects are refused\"\n}\n"

func TestChartsRunTheFleetUnderTheirOwnServiceAccounts(t *testing.T) {
	g := testenv.Assertions(t)
	ctx := t.Context()
	certManagerCRDs, err := testenv.CertManagerCRDDirectory()
	g.Expect(err).NotTo(HaveOccurred())
	audit := t.TempDir()
	mgmt := testenv.StartCluster(t, "management",
		testenv.WithoutFleeetCRDs(certManagerCRDs), testenv.WithAuditLog(filepath.Join(audit, "management.log")))
	down := testenv.StartCluster(t, "downstream",
		testenv.WithoutFleeetCRDs(), testenv.WithAuditLog(filepath.Join(audit, "downstream.log")))
	testenv.StartFlux(t, down, testenv.SourceController, testenv.KustomizeController)

	// fleet-manager, with a user policy from values. cert-manager does not
	// run here: its Certificate must still be accepted by the apiserver.
	managerChart := testenv.ChartOf(t, "fleet-manager")
	managerHelm := testenv.HelmFor(t, mgmt, managerNamespace)
	managerValues := map[string]any{
		"management": map[string]any{"url": mgmt.Config.Host, "caBundle": string(mgmt.Config.CAData)},
		"policies":   map[string]any{"frozen": frozenPolicy},
		"dashboard":  map[string]any{"enabled": true},
	}
	managerRelease := managerChart.Install(t, managerHelm, "fleet-manager", managerNamespace, managerValues)
	certificate := &unstructured.Unstructured{}
	certificate.SetAPIVersion("cert-manager.io/v1")
	certificate.SetKind("Certificate")
	g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: "fleet-manager-webhook"}, certificate)).To(Succeed())
	secretName, _, _ := unstructured.NestedString(certificate.Object, "spec", "secretName")
	g.Expect(secretName).To(Equal("fleet-manager-webhook-cert"))

	// No kubelet, kube-proxy or cert-manager here: the webhook is reached on
	// loopback with a certificate the test made, which is what cert-manager's
	// CA injection and the Service would provide in a cluster.
	certDir, caPEM := testenv.ServingCertificate(t)
	webhookHost, webhookPort, err := net.SplitHostPort(testenv.FreeAddr(t))
	g.Expect(err).NotTo(HaveOccurred())
	webhookURL := "https://" + net.JoinHostPort(webhookHost, webhookPort) + "/validate"
	chartClientConfig := routeWebhook(t, mgmt, admissionregistrationv1.WebhookClientConfig{URL: &webhookURL, CABundle: caPEM})
	g.Expect(chartClientConfig.Service).NotTo(BeNil())
	g.Expect(chartClientConfig.Service.Name).To(Equal("fleet-manager-webhook"))

	managementCA := filepath.Join(t.TempDir(), "ca.crt")
	g.Expect(os.WriteFile(managementCA, mgmt.Config.CAData, 0o600)).To(Succeed())
	managerBin := testenv.BuildCommand(t, "fleet-manager", testenv.TestVersion)
	manager := testenv.RunRelease(t, mgmt, managerRelease, managerBin,
		map[string]string{"webhook-port": webhookPort, "webhook-cert-dir": certDir, "management-ca-file": managementCA},
		"--webhook-host="+webhookHost)

	// A platform engineer makes a tenant and a token; the token's Secret
	// holds the agent chart's values.
	g.Expect(mgmt.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: tenant, Labels: map[string]string{fleeetv1.TenantLabel: "true"},
		Annotations: map[string]string{"fleeet.dev/allow-insecure-http": "true"},
	}})).To(Succeed())
	token := &fleeetv1.RegistrationToken{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "edge"},
		// The agent below asks for region=eu, which the token must free.
		Spec: fleeetv1.RegistrationTokenSpec{RemoteLabels: map[string]string{"env": "edge"}, FreeLabelKeys: []string{"region"}},
	}
	testenv.IssueToken(t, mgmt, token, func() string { return testenv.Tail(manager.LogPath, 30) })

	// fleet-agent, from the enrolment string alone plus the cluster name and
	// what this test's cluster needs.
	// The default tenant role, admin, is an aggregated ClusterRole whose
	// rules only kube-controller-manager fills in; none runs here.
	g.Expect(down.Client.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-apps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}},
	})).To(Succeed())
	agentValues := map[string]any{
		"token":                testenv.EnrolmentOf(t, mgmt, token),
		"clusterName":          "edge",
		"labels":               map[string]any{"region": "eu"},
		"tenantServiceAccount": map[string]any{"clusterRole": "tenant-apps"},
	}
	agentChart := testenv.ChartOf(t, "fleet-agent")
	agentHelm := testenv.HelmFor(t, down, agentNamespace)
	agentRelease := agentChart.Install(t, agentHelm, "fleet-agent", agentNamespace, agentValues)
	// The cluster's Flux (its CRDs installed by the harness, not by the
	// chart) is the one the agent uses: the chart brings no other.
	for _, o := range testenv.Objects(t, agentRelease) {
		g.Expect(o.GetLabels()).NotTo(HaveKeyWithValue("app.kubernetes.io/part-of", "flux"), "%s %s", o.GetKind(), o.GetName())
	}
	agent := testenv.RunRelease(t, down, agentRelease, testenv.BuildCommand(t, "fleet-agent", testenv.TestVersion),
		map[string]string{"heartbeat-interval": "2s"})

	// An app for every edge cluster, applied downstream by Flux as the
	// tenant's ServiceAccount.
	git := testenv.NewGitServer(t)
	repo, _ := git.Commit(t, "app", map[string]string{
		"deploy/kustomization.yaml": "resources: [configmap.yaml]\n",
		"deploy/configmap.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  version: one\n",
	}, "v1.0.0")
	module := &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "app"},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "edge", "region": "eu"}},
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: repo, Tag: "v1.0.0"}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy", TargetNamespace: tenant}},
			},
		}},
	}
	g.Expect(mgmt.Client.Create(ctx, module)).To(Succeed())
	logs := func() string {
		return "manager:\n" + testenv.Tail(manager.LogPath, 30) + "\nagent:\n" + testenv.Tail(agent.LogPath, 30)
	}
	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "app"}, cm)).To(Succeed())
		g.Expect(cm.Data).To(HaveKeyWithValue("version", "one"))
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKeyFromObject(module), module)).To(Succeed())
		g.Expect(module.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1, Ready: 1}))
		remote := &fleeetv1.Remote{}
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "edge"}, remote)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(remote.Status.Conditions, fleeetv1.ConnectedCondition)).To(BeTrue())
		// Read with the chart's ClusterRole alone; the harness's Flux CRDs
		// carry no version label.
		g.Expect(remote.Status.Flux).To(HaveValue(Equal(fleeetv1.FluxStatus{Version: "unknown"})))
		g.Expect(apimeta.IsStatusConditionTrue(remote.Status.Conditions, fleeetv1.FluxCompatibleCondition)).To(BeTrue())
		// The agent and the manager are the same build: in the skew window.
		g.Expect(apimeta.IsStatusConditionTrue(remote.Status.Conditions, fleeetv1.AgentCompatibleCondition)).To(BeTrue())
		g.Expect(upstreamReady(g, down)).To(BeTrue())
	}, 3*timeout, poll).Should(Succeed(), logs)
	// Helm installed the agent's CRDs; the agent applied its own over them
	// at start, with the chart's ClusterRole alone.
	for _, name := range []string{"assemblages.fleeet.dev", "upstreams.fleeet.dev"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Name: name}, crd)).To(Succeed())
		g.Expect(crd.Annotations).To(HaveKeyWithValue("fleeet.dev/agent-version", testenv.TestVersion), name)
	}
	ks := &kustomizev1.KustomizationList{}
	g.Expect(down.Client.List(ctx, ks, client.InNamespace(tenant))).To(Succeed())
	g.Expect(ks.Items).To(HaveLen(1))
	g.Expect(ks.Items[0].Spec.ServiceAccountName).To(Equal("fleeet-tenant"), "Flux impersonates the chart's tenant ServiceAccount")

	// The user policy from the chart's values is in force.
	g.Eventually(func(g Gomega) {
		frozen := module.DeepCopy()
		frozen.ObjectMeta = metav1.ObjectMeta{Namespace: tenant, Name: "frozen", Labels: map[string]string{"frozen": "true"}}
		err := mgmt.Client.Create(ctx, frozen)
		g.Expect(err).To(MatchError(ContainSubstring("metadata.labels.frozen: frozen objects are refused")))
	}, timeout, poll).Should(Succeed())

	// The dashboard, as its Deployment runs it, under its own ServiceAccount.
	dashboardAddr := testenv.FreeAddr(t)
	// The chart serves HTTPS from a Secret the pod mounts; the process gets
	// a certificate of the test's instead.
	dashboardCerts, dashboardCA := testenv.ServingCertificate(t)
	dashboard := testenv.RunDeployment(t, mgmt, managerRelease, "fleet-manager-dashboard", managerBin, map[string]string{"address": dashboardAddr,
		"tls-cert-file": dashboardCerts + "/tls.crt", "tls-key-file": dashboardCerts + "/tls.key"})
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	g.Expect(dashboard.WaitHTTP(waitCtx, "https://"+dashboardAddr+"/readyz")).To(Succeed(), func() string { return testenv.Tail(dashboard.LogPath, 30) })
	expectDashboard(t, mgmt, "https://"+dashboardAddr, dashboardCA)

	// helm upgrade of both, with changed values, while they run.
	// The chart's Service reference goes back for the upgrade's three-way
	// merge, then the test's route again.
	managerValues["logLevel"] = "debug"
	routeWebhook(t, mgmt, chartClientConfig)
	managerRelease = managerChart.Upgrade(t, managerHelm, "fleet-manager", managerNamespace, managerValues)
	routeWebhook(t, mgmt, admissionregistrationv1.WebhookClientConfig{URL: &webhookURL, CABundle: caPEM})
	g.Expect(testenv.CommandLine(t, managerRelease, nil)).To(ContainElement("--zap-log-level=debug"))
	agentValues["heartbeatInterval"] = "20s"
	agentRelease = agentChart.Upgrade(t, agentHelm, "fleet-agent", agentNamespace, agentValues)
	g.Expect(testenv.CommandLine(t, agentRelease, nil)).To(ContainElement("--heartbeat-interval=20s"))
	g.Consistently(func(g Gomega) {
		g.Expect(upstreamReady(g, down)).To(BeTrue())
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKeyFromObject(module), module)).To(Succeed())
		g.Expect(module.Status.Summary.Ready).To(Equal(int32(1)))
	}, 10*time.Second, time.Second).Should(Succeed(), logs)

	// Nothing above was refused to either ServiceAccount.
	for _, c := range []struct{ log, user string }{
		{"management.log", "system:serviceaccount:" + managerNamespace + ":fleet-manager"},
		{"management.log", "system:serviceaccount:" + managerNamespace + ":fleet-manager-dashboard"},
		{"downstream.log", "system:serviceaccount:" + agentNamespace + ":fleet-agent"},
	} {
		used, refused := permissionsUsed(t, filepath.Join(audit, c.log), c.user)
		t.Logf("%s used: %s", c.user, strings.Join(used, ", "))
		g.Expect(refused).To(BeEmpty(), "requests refused to %s", c.user)
	}

	// helm uninstall, once the pods are gone, leaves only the CRDs.
	g.Expect(agent.Stop(30 * time.Second)).To(Succeed())
	testenv.Uninstall(t, agentHelm, "fleet-agent")
	expectRemoved(t, down, testenv.Objects(t, agentRelease))
	g.Expect(dashboard.Stop(30 * time.Second)).To(Succeed())
	g.Expect(manager.Stop(30 * time.Second)).To(Succeed())
	testenv.Uninstall(t, managerHelm, "fleet-manager")
	expectRemoved(t, mgmt, testenv.Objects(t, managerRelease))
	for _, crd := range []string{"modules.fleeet.dev", "remotes.fleeet.dev"} {
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Name: crd}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}})).To(Succeed(), "Helm keeps CRDs")
	}
	cm := &corev1.ConfigMap{}
	g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "app"}, cm)).To(Succeed(),
		"what Flux applied stays until the tenant namespace itself is deleted")
}

// expectDashboard checks the in-cluster dashboard at base shows the
// tenant's fleet to a ServiceAccount that may read it, and refuses a
// request without a token and one whose token has no rights to it; ca
// signs its serving certificate.
func expectDashboard(t *testing.T, mgmt *testenv.Cluster, base string, ca []byte) {
	g := NewWithT(t)
	ctx := t.Context()
	for _, name := range []string{"viewer", "outsider"} {
		g.Expect(mgmt.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: name}})).To(Succeed())
	}
	g.Expect(mgmt.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "fleet-viewer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{fleeetv1.GroupVersion.Group},
			Resources: []string{"modules", "remotes", "proxyassemblages"}, Verbs: []string{"list", "watch"}}},
	})).To(Succeed())
	g.Expect(mgmt.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "fleet-viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "fleet-viewer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tenant, Name: "viewer"}},
	})).To(Succeed())
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	get := func(g Gomega, path, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		g.Expect(err).NotTo(HaveOccurred())
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return resp.StatusCode, string(body)
	}
	grid := "/namespaces/" + tenant + "/"
	status, _ := get(g, grid, "")
	g.Expect(status).To(Equal(http.StatusUnauthorized), "no token")
	status, body := get(g, grid, testenv.ServiceAccountToken(t, mgmt, tenant, "outsider"))
	g.Expect(status).To(Equal(http.StatusForbidden), "a token without rights to the namespace")
	g.Expect(body).NotTo(ContainSubstring("edge"))
	viewer := testenv.ServiceAccountToken(t, mgmt, tenant, "viewer")
	g.Eventually(func(g Gomega) {
		status, body := get(g, grid, viewer)
		g.Expect(status).To(Equal(http.StatusOK), body)
		g.Expect(body).To(MatchRegexp(`<tr id="r-edge"><th><a href="remotes/edge">edge</a></th><td class="ready">`))
	}, timeout, poll).Should(Succeed())
	status, body = get(g, grid+"modules/app", viewer)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring("forbidden: system:serviceaccount:"+tenant+":viewer may not list events in namespace "+tenant),
		"the Module's events are shown only to who may read them")
}

// routeWebhook sets the clientConfig of fleet-manager's webhooks and
// returns the previous one. The cert-manager annotation is checked on the
// way: in a cluster, cainjector fills in the CA and the Service routes.
func routeWebhook(t *testing.T, c *testenv.Cluster, to admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.WebhookClientConfig {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	NewWithT(t).Expect(c.Client.Get(t.Context(), client.ObjectKey{Name: "fleet-manager"}, vwc)).To(Succeed())
	NewWithT(t).Expect(vwc.Annotations).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", managerNamespace+"/fleet-manager-webhook"))
	return testenv.RouteWebhook(t, c, "fleet-manager", to)
}

func upstreamReady(g Gomega, down *testenv.Cluster) bool {
	up := &fleeetv1.Upstream{}
	g.Expect(down.Client.Get(context.Background(), client.ObjectKey{Namespace: agentNamespace, Name: tenant}, up)).To(Succeed())
	return apimeta.IsStatusConditionTrue(up.Status.Conditions, fleeetv1.ReadyCondition)
}

// expectRemoved checks every object a release rendered is gone; a
// Namespace may still be terminating (no namespace controller runs here).
func expectRemoved(t *testing.T, c *testenv.Cluster, objs []*unstructured.Unstructured) {
	t.Helper()
	g := NewWithT(t)
	for _, o := range objs {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		err := c.Client.Get(t.Context(), client.ObjectKeyFromObject(o), live)
		if err == nil && o.GetKind() == "Namespace" {
			g.Expect(live.GetDeletionTimestamp()).NotTo(BeNil(), "namespace %s is being deleted", o.GetName())
			continue
		}
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s %s/%s left behind: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
}

// permissionsUsed lists what user did, as "verb resource" (or "verb URI"),
// and the requests the apiserver refused with 403, from its audit log.
func permissionsUsed(t *testing.T, path, user string) (used, refused []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, ev := range testenv.AuditLog(t, path, user) {
		what := ev.Verb + " " + cmp.Or(ev.Resource, ev.RequestURI)
		if ev.Code == http.StatusForbidden {
			refused = append(refused, what+" "+ev.RequestURI)
		}
		seen[what] = true
	}
	return slices.Sorted(maps.Keys(seen)), refused
}
