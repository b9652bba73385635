// Package e2e runs fleeet's binaries as processes against real apiservers.
package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// TestMain builds each command the tests run once, for all of them.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	return string(body)
}

func TestControllerBinariesServeHealthAndMetricsAndStopOnSIGTERM(t *testing.T) {
	c := testenv.StartCluster(t, "management", testenv.WithWebhooks())
	ns := c.Namespace(t, "fleeet-system", nil)

	for _, cmd := range []string{"fleet-manager", "fleet-agent"} {
		t.Run(cmd, func(t *testing.T) {
			g := NewWithT(t)
			// The demo fleet's build, stamped "demo": one link for the package.
			bin := testenv.BuildCommand(t, cmd, "demo")
			health, metrics := testenv.FreeAddr(t), testenv.FreeAddr(t)
			args := []string{"--health-probe-bind-address=" + health, "--metrics-bind-address=" + metrics,
				"--leader-elect", "--leader-election-namespace=" + ns}
			if cmd == "fleet-manager" {
				args = append(args, "--webhook-cert-dir="+c.Webhooks.LocalServingCertDir,
					"--webhook-host="+c.Webhooks.LocalServingHost, fmt.Sprintf("--webhook-port=%d", c.Webhooks.LocalServingPort))
			}
			p := testenv.StartProcess(t, cmd, bin, []string{"KUBECONFIG=" + c.Kubeconfig}, args...)

			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			g.Expect(p.WaitHTTP(ctx, "http://"+health+"/readyz")).To(Succeed())
			g.Expect(get(t, "http://"+health+"/healthz")).To(Equal("ok"))
			// The leader gauge shows the binary took the Lease and serves
			// metrics, over HTTPS, to a metrics reader.
			token := testenv.MetricsReaderToken(t, c, "")
			g.Eventually(func(g Gomega) string { return testenv.Metrics(g, metrics, token) }, 30*time.Second).
				Should(MatchRegexp(`leader_election_master_status\{name="` + cmd + `.fleeet.dev"\} 1`))

			g.Expect(p.Stop(20*time.Second)).To(Succeed(), "a clean exit with status 0 on SIGTERM")
			logged, err := os.ReadFile(p.LogPath)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(logged)).To(ContainSubstring(`"version":"demo"`))
		})
	}
}

func TestControllerBinaryRejectsAnUnknownFlag(t *testing.T) {
	g := NewWithT(t)
	out, err := exec.Command(testenv.BuildCommand(t, "fleet-manager", "demo"), "--no-such-flag").CombinedOutput()
	g.Expect(err).To(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring("unknown flag: --no-such-flag"))
}

func TestFleetctlPrintsItsVersion(t *testing.T) {
	g := NewWithT(t)
	out, err := exec.Command(testenv.BuildCommand(t, "fleetctl", testenv.TestVersion), "version").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(Equal(testenv.TestVersion + "\n"))
}
