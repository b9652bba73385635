// Package ct_test runs chart-testing's `ct install` over both charts, as a
// chart's CI does: each chart is installed with every ci/*-values.yaml into
// a real cluster whose node runs its Pods from the images `make images`
// builds, `helm test` runs the chart's own test hooks, and the release is
// uninstalled. Only what a values file cannot know ahead of the test —
// enrolment strings of the test's management cluster, the CA of a
// certificate the test made — is merged into a copy of the chart, and the
// manager runs one replica (test/charts runs the default two as Pods).
package ct_test

import (
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const releaseNamespace = "fleeet-system"

// TestCTInstallsTheAgentChartWithEachCIValuesFile enrols a cluster with a
// real node through each of the agent chart's ci values files, against a
// running manager: the chart's test hook passes only when every Upstream
// of the release is Ready.
func TestCTInstallsTheAgentChartWithEachCIValuesFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the images and runs a real node")
	}
	g := testenv.Assertions(t)
	ctx := t.Context()
	// The management apiserver serves on an address the node's Pods reach.
	mgmt := testenv.StartCluster(t, "management", testenv.WithNodes(), testenv.WithWebhooks())
	manager := testenv.StartManagerProcess(t, testenv.BuildCommand(t, "fleet-manager", testenv.TestVersion), mgmt)
	down := testenv.StartCluster(t, "downstream", testenv.WithNodes(), testenv.WithoutCRDs())
	node := down.StartNode(t, "edge-1")
	node.ImportImage(t, testenv.MakeImages(t)["fleet-agent"])
	for _, archive := range testenv.FluxImages(t, testenv.SourceController, testenv.KustomizeController, testenv.HelmController) {
		node.ImportImage(t, archive)
	}

	// Each tenant of each values file registers into a fresh tenant
	// namespace with a token of its own, so no two installs name the same
	// Remote.
	var existing []string // downstream namespaces created here, not by the chart
	chart := copyChart(t, "fleet-agent", func(file string, values map[string]any) {
		if values["mode"] == "push" {
			return // no token: the manager would push to it
		}
		for i, entry := range tenantEntries(values) {
			ns := mgmt.Namespace(t, "ct", map[string]string{fleeetv1.TenantLabel: "true"})
			token := &fleeetv1.RegistrationToken{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ct"},
				Spec:       fleeetv1.RegistrationTokenSpec{FreeLabelKeys: labelKeys(values, entry)},
			}
			testenv.IssueToken(t, mgmt, token, func() string { return testenv.Tail(manager.LogPath, 30) })
			delete(entry, "management")
			entry["token"] = testenv.EnrolmentOf(t, mgmt, token)
			if values["createNamespaces"] == false {
				downstream, _ := entry["namespace"].(string)
				if downstream == "" {
					downstream = ns
				}
				g.Expect(down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: downstream}})).To(Succeed(), "%s tenant %d", file, i)
				existing = append(existing, downstream)
			}
		}
	})
	// The test nodes have no cluster DNS: source-controller advertises its
	// Service's address from the environment instead of its DNS name.
	// Each install goes into a namespace of its own, as ct makes when it is
	// given none: helm uninstall deletes a release's RBAC while its Pods
	// stop, so Flux's and the agent's leader-election Leases outlive them,
	// and the next install in the same namespace waited out each Lease
	// (about 40 s) before its source-controller served artifacts.
	testenv.ChartTestingInstall(t, down, chart, "",
		"--helm-extra-set-args", "--set=flux.sourceController.storageAdvertisedAddress=$(SOURCE_CONTROLLER_SERVICE_HOST):$(SOURCE_CONTROLLER_SERVICE_PORT)")

	// Each uninstall took the tenant namespaces it created with it: its
	// pre-delete hook removed their plans while the agent and Flux ran.
	g.Eventually(func(g Gomega) {
		list := &corev1.NamespaceList{}
		g.Expect(down.Client.List(ctx, list)).To(Succeed())
		for _, ns := range list.Items {
			g.Expect(ns.Status.Phase).NotTo(Equal(corev1.NamespaceTerminating), "namespace %s: %+v", ns.Name, ns.Status.Conditions)
		}
	}, time.Minute, time.Second).Should(Succeed())
	// In the namespaces it did not create, the hook let the Assemblages go
	// (keeping their workloads): none is left holding a finalizer that
	// nobody will release.
	g.Expect(existing).NotTo(BeEmpty(), "a ci values file installs into existing namespaces")
	for _, ns := range existing {
		list := &fleeetv1.AssemblageList{}
		g.Expect(down.Client.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "namespace %s", ns)
	}
}

// TestCTInstallsTheManagerChartWithEachCIValuesFile installs the manager
// chart with each of its ci values files on a cluster with a real node and
// a real cert-manager: the chart's test hook passes only when the API
// server calls the webhook through its Service, trusts its certificate,
// and the webhook refuses a Module outside the tenant namespaces.
func TestCTInstallsTheManagerChartWithEachCIValuesFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the images and runs a real node")
	}
	g := testenv.Assertions(t)
	ctx := t.Context()
	certManagerCRDs, err := testenv.CertManagerCRDDirectory()
	g.Expect(err).NotTo(HaveOccurred())
	prometheusCRDs, err := testenv.PrometheusOperatorCRDDirectory()
	g.Expect(err).NotTo(HaveOccurred())
	mgmt := testenv.StartCluster(t, "management", testenv.WithNodes(), testenv.WithoutFleeetCRDs(certManagerCRDs, prometheusCRDs))
	testenv.StartCertManager(t, mgmt)
	mgmt.StartNode(t, "management-1").ImportImage(t, testenv.MakeImages(t)["fleet-manager"])
	g.Expect(mgmt.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}})).To(Succeed())

	// What the values files name as existing: the own certificate's Secret
	// (for any release name, as ct makes one up), the dashboard's, and the
	// ClusterIssuer of the production values.
	certDir, caPEM := testenv.ServingCertificate(t, "*."+releaseNamespace+".svc")
	for _, name := range []string{"fleet-manager-webhook-tls", "fleet-dashboard-tls"} {
		g.Expect(mgmt.Client.Create(ctx, tlsSecret(t, certDir, name))).To(Succeed())
	}
	issuer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
		"metadata": map[string]any{"name": "platform-ca"},
		"spec":     map[string]any{"selfSigned": map[string]any{}},
	}}
	g.Expect(mgmt.Client.Create(ctx, issuer)).To(Succeed())

	chart := copyChart(t, "fleet-manager", func(file string, values map[string]any) {
		// A second replica would prove nothing the test hook checks, and
		// test/charts' TestChartsRunAsPodsFromTheirImages runs the
		// default two: one Pod per install spares the node its start.
		values["replicas"] = 1
		management, _ := values["management"].(map[string]any)
		if _, ok := management["caBundle"]; ok {
			management["caBundle"] = string(mgmt.Config.CAData)
		}
		if webhook, _ := values["webhook"].(map[string]any); webhook["caBundle"] != nil {
			webhook["caBundle"] = base64.StdEncoding.EncodeToString(caPEM)
		}
	})
	testenv.ChartTestingInstall(t, mgmt, chart, releaseNamespace)
}

// tlsSecret is a kubernetes.io/tls Secret name in the release namespace
// holding the certificate and key in dir.
func tlsSecret(t *testing.T, dir, name string) *corev1.Secret {
	t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNamespace, Name: name}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{}}
	for _, key := range []string{"tls.crt", "tls.key"} {
		data, err := os.ReadFile(filepath.Join(dir, key))
		if err != nil {
			t.Fatal(err)
		}
		secret.Data[key] = data
	}
	return secret
}

// tenantEntries are the values of each tenant the agent chart registers:
// the top level, then each entry of tenants.
func tenantEntries(values map[string]any) []map[string]any {
	entries := []map[string]any{values}
	tenants, _ := values["tenants"].([]any)
	for _, tenant := range tenants {
		entries = append(entries, tenant.(map[string]any))
	}
	return entries
}

// labelKeys are the label keys a tenant entry asks for, with the top
// level's: its token must free them.
func labelKeys(values, entry map[string]any) []string {
	keys := map[string]bool{}
	for _, m := range []map[string]any{values, entry} {
		labels, _ := m["labels"].(map[string]any)
		for k := range labels {
			keys[k] = true
		}
	}
	return slices.Sorted(maps.Keys(keys))
}

// copyChart copies the chart name into a temporary charts directory and
// lets edit change each of its ci values files, by file name, before ct
// reads them. It returns the copy's directory.
func copyChart(t *testing.T, name string, edit func(file string, values map[string]any)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "charts", name)
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(testenv.RepoRoot, "charts", name))); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("chart %s has no ci values files (%v)", name, err)
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		values := map[string]any{}
		if err := yaml.Unmarshal(data, &values); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		edit(filepath.Base(path), values)
		data, err = yaml.Marshal(values)
		if err != nil {
			t.Fatal(err)
		}
		header := fmt.Sprintf("# %s, edited by test/ct for the test's clusters\n", strings.TrimPrefix(path, filepath.Dir(dir)+"/"))
		if err := os.WriteFile(path, append([]byte(header), data...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
