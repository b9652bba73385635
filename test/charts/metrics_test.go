package charts_test

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// Both binaries, run as the charts run them, serve metrics only to a caller
// the apiserver authenticates and authorises: no token is 401, a token
// without the chart's metrics-reader ClusterRole is 403, and a
// ServiceAccount bound to that ClusterRole — as Prometheus's would be —
// reads them.
func TestChartsServeMetricsOnlyToMetricsReaders(t *testing.T) {
	g := testenv.Assertions(t)
	certManagerCRDs, err := testenv.CertManagerCRDDirectory()
	g.Expect(err).NotTo(HaveOccurred())
	c := testenv.StartCluster(t, "management", testenv.WithoutFleeetCRDs(certManagerCRDs))

	managerRelease := testenv.ChartOf(t, "fleet-manager").Install(t, testenv.HelmFor(t, c, managerNamespace),
		"fleet-manager", managerNamespace, map[string]any{"management": map[string]any{"url": c.Config.Host}})
	certDir, _ := testenv.ServingCertificate(t)
	webhookHost, webhookPort, err := net.SplitHostPort(testenv.FreeAddr(t))
	g.Expect(err).NotTo(HaveOccurred())
	managementCA := filepath.Join(t.TempDir(), "ca.crt")
	g.Expect(os.WriteFile(managementCA, c.Config.CAData, 0o600)).To(Succeed())
	managerMetrics := testenv.FreeAddr(t)
	testenv.RunRelease(t, c, managerRelease, testenv.BuildCommand(t, "fleet-manager", testenv.TestVersion),
		map[string]string{"webhook-port": webhookPort, "webhook-cert-dir": certDir, "management-ca-file": managementCA,
			"metrics-bind-address": managerMetrics},
		"--webhook-host="+webhookHost)

	// The agent never reaches this management URL; it serves metrics all
	// the same. No clusterName: the chart names the cluster after its
	// kube-system namespace.
	const agentNS = "fleeet-agent"
	agentRelease := testenv.ChartOf(t, "fleet-agent").Install(t, testenv.HelmFor(t, c, agentNS), "fleet-agent", agentNS,
		map[string]any{"token": "not-a-token", "management": map[string]any{"url": "https://127.0.0.1:1", "namespace": tenant}})
	kubeSystem := &corev1.Namespace{}
	g.Expect(c.Client.Get(t.Context(), client.ObjectKey{Name: "kube-system"}, kubeSystem)).To(Succeed())
	up := &fleeetv1.Upstream{}
	g.Expect(c.Client.Get(t.Context(), client.ObjectKey{Namespace: agentNS, Name: tenant}, up)).To(Succeed())
	g.Expect(up.Spec.ClusterName).To(Equal("cluster-"+string(kubeSystem.UID)), "a cluster named after its kube-system namespace's UID")
	agentMetrics := testenv.FreeAddr(t)
	testenv.RunRelease(t, c, agentRelease, testenv.BuildCommand(t, "fleet-agent", testenv.TestVersion),
		map[string]string{"metrics-bind-address": agentMetrics})

	// A ServiceAccount with rights of its own, but not to the metrics.
	other := c.Namespace(t, "other", nil)
	g.Expect(c.Client.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "nosy"}})).To(Succeed())
	nosy := testenv.ServiceAccountToken(t, c, other, "nosy")

	for name, tc := range map[string]struct{ addr, reader, metric string }{
		"fleet-manager": {managerMetrics, "fleet-manager-metrics-reader", `leader_election_master_status{name="fleet-manager.fleeet.dev"}`},
		"fleet-agent":   {agentMetrics, "fleet-agent-metrics-reader", `leader_election_master_status{name="fleet-agent.fleeet.dev"}`},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			// The metrics server starts with the process's manager, a
			// moment after the process.
			g.Eventually(func(g Gomega) {
				status, body := testenv.ScrapeMetrics(g, tc.addr, "")
				g.Expect(status).To(Equal(http.StatusUnauthorized), body)
				g.Expect(body).NotTo(ContainSubstring("fleeet_"))
			}, 30*time.Second, poll).Should(Succeed())
			// A token the apiserver does not know: controller-runtime's filter
			// answers 500 when the TokenReview comes back with an error, as it
			// does for a malformed token; refused all the same.
			status, body := testenv.ScrapeMetrics(g, tc.addr, "forged.token.value")
			g.Expect(status).To(BeElementOf(http.StatusUnauthorized, http.StatusInternalServerError), body)
			g.Expect(body).NotTo(ContainSubstring("fleeet_"))
			status, body = testenv.ScrapeMetrics(g, tc.addr, nosy)
			g.Expect(status).To(Equal(http.StatusForbidden), body)
			g.Expect(body).NotTo(ContainSubstring("fleeet_"))

			reader := testenv.MetricsReaderToken(t, c, tc.reader)
			g.Eventually(func(g Gomega) string { return testenv.Metrics(g, tc.addr, reader) }, 30*time.Second, poll).
				Should(ContainSubstring(tc.metric))

			// Plain HTTP to the same port is no way around it.
			resp, err := http.Get("http://" + tc.addr + "/metrics")
			if err == nil {
				defer resp.Body.Close()
				g.Expect(resp.StatusCode).NotTo(Equal(http.StatusOK))
			}
		})
	}
}
