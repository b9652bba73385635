package adversarial_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// jwt matches a Kubernetes bearer token anywhere in a body.
const jwt = `eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.`

// scrapeRefused scrapes addr's metrics with token (none when empty) and
// asserts the caller is turned away with one of statuses, seeing no metric
// and no other tenant's name (the refusal names the caller itself).
func scrapeRefused(g Gomega, addr, token string, statuses ...int) string {
	status, body := testenv.ScrapeMetrics(g, addr, token)
	g.Expect(status).To(BeElementOf(statuses), body)
	g.Expect(body).NotTo(ContainSubstring("fleeet_"))
	g.Expect(body).NotTo(ContainSubstring(tenantB))
	return http.StatusText(status) + ": " + body
}

// tenantToken returns a token of a ServiceAccount of team-a in c that holds
// every fleeet.dev right in team-a, as a tenant's CI would.
func tenantToken(t *testing.T, c *testenv.Cluster, name string) string {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(c.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name}})).To(Succeed())
	g.Expect(c.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"fleeet.dev", ""}, Resources: []string{"*"}, Verbs: []string{"*"}}}})).To(Succeed())
	g.Expect(c.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tenantA, Name: name}}})).To(Succeed())
	return mint(t, c, tenantA, name)
}

// servingAttacks read what the manager and the agent serve besides the API
// and admission: their metrics, which name every tenant and its rollouts,
// and their health endpoints, all reachable by anyone on the network.
func servingAttacks(ctx context.Context, f *fleet) []attack {
	const anyone = "any network client, no credentials"
	const tenant = "a ServiceAccount of team-a with every right in team-a (not bound to the metrics reader)"
	const cluster = "cluster edge of team-a: a token of ServiceAccount fleeet-remote-edge"
	return []attack{
		{"scrape-manager-metrics-unauthenticated", anyone, "GET https://<manager>/metrics without a token", func(t *testing.T, g Gomega) string {
			return scrapeRefused(g, f.managerMetrics, "", http.StatusUnauthorized)
		}},
		{"scrape-manager-metrics-over-plain-http", anyone, "GET http://<manager>/metrics", func(t *testing.T, g Gomega) string {
			resp, err := http.Get("http://" + f.managerMetrics + "/metrics")
			if err != nil {
				return "no answer: " + err.Error()
			}
			defer resp.Body.Close()
			g.Expect(resp.StatusCode).NotTo(Equal(http.StatusOK))
			return resp.Status
		}},
		{"scrape-manager-metrics-with-a-forged-token", anyone, "GET https://<manager>/metrics with a made-up bearer token", func(t *testing.T, g Gomega) string {
			return scrapeRefused(g, f.managerMetrics, "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.c2lnbmF0dXJl",
				http.StatusUnauthorized, http.StatusInternalServerError)
		}},
		{"scrape-manager-metrics-as-a-tenant", tenant, "GET https://<manager>/metrics with the tenant's token", func(t *testing.T, g Gomega) string {
			return scrapeRefused(g, f.managerMetrics, tenantToken(t, f.mgmt, "ci-metrics"), http.StatusForbidden)
		}},
		{"scrape-manager-metrics-as-a-cluster", cluster, "GET https://<manager>/metrics with the cluster's token", func(t *testing.T, g Gomega) string {
			return scrapeRefused(g, f.managerMetrics, mint(t, f.mgmt, tenantA, fleeetv1.RemoteIdentityName("edge")), http.StatusForbidden)
		}},
		{"scrape-agent-metrics-unauthenticated", anyone, "GET https://<agent>/metrics without a token", func(t *testing.T, g Gomega) string {
			return scrapeRefused(g, f.agentMetrics, "", http.StatusUnauthorized)
		}},
		{"scrape-agent-metrics-as-a-tenant", "team-a's downstream ServiceAccount fleeet-tenant (Flux applies its syncs as it)",
			"GET https://<agent>/metrics with the tenant's downstream token", func(t *testing.T, g Gomega) string {
				return scrapeRefused(g, f.agentMetrics, mint(t, f.down, tenantA, tenantSA), http.StatusForbidden)
			}},
		{"scrape-agent-metrics-as-a-cluster", cluster, "GET https://<agent>/metrics with the cluster's management token", func(t *testing.T, g Gomega) string {
			// The downstream apiserver does not know the management
			// cluster's tokens at all.
			return scrapeRefused(g, f.agentMetrics, mint(t, f.mgmt, tenantA, fleeetv1.RemoteIdentityName("edge")),
				http.StatusUnauthorized, http.StatusInternalServerError)
		}},
		{"authorised-scrape-leaks-no-secret", "Prometheus: a ServiceAccount bound to each chart's <release>-metrics-reader",
			"GET https://<manager>/metrics and https://<agent>/metrics; look for tokens", func(t *testing.T, g Gomega) string {
				for _, s := range []struct {
					c          *testenv.Cluster
					addr, role string
				}{{f.mgmt, f.managerMetrics, "fleet-manager-metrics-reader"}, {f.down, f.agentMetrics, "fleet-agent-metrics-reader"}} {
					token := testenv.MetricsReaderToken(t, s.c, s.role)
					body := testenv.Metrics(g, s.addr, token)
					g.Expect(body).To(ContainSubstring("fleeet_"), "a real scrape")
					g.Expect(body).NotTo(ContainSubstring(token))
					g.Expect(body).NotTo(MatchRegexp(jwt))
				}
				return "both scrapes served metrics holding no bearer token"
			}},
		{"flood-manager-metrics-with-made-up-tokens", "any network client, from an address of its own, no credentials",
			"GET https://<manager>/metrics 40 times at once, each with a new made-up bearer token; then Prometheus scrapes", func(t *testing.T, g Gomega) string {
				// Every 127.0.0.0/8 address is this host's: the flood comes
				// from one other than Prometheus's.
				dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.4")}, Timeout: 5 * time.Second}
				flooder := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext,
					TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the attacker trusts anything
				var mu sync.Mutex
				counts := map[int]int{}
				var wg sync.WaitGroup
				for i := range 40 {
					wg.Go(func() {
						req, _ := http.NewRequest(http.MethodGet, "https://"+f.managerMetrics+"/metrics", nil)
						req.Header.Set("Authorization", fmt.Sprintf("Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.made-up-%d", i))
						status := 0
						if resp, err := flooder.Do(req); err == nil {
							status = resp.StatusCode
							if status == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
								status = -http.StatusTooManyRequests // told no time to come back
							}
							resp.Body.Close()
						}
						mu.Lock()
						counts[status]++
						mu.Unlock()
					})
				}
				wg.Wait()
				// A burst of 10 per address reaches the token review; the
				// rest are turned away before it.
				g.Expect(counts[http.StatusTooManyRequests]).To(BeNumerically(">=", 30), "%v", counts)
				g.Expect(counts).NotTo(HaveKey(http.StatusOK))
				g.Expect(counts).NotTo(HaveKey(-http.StatusTooManyRequests), "each 429 says when to come back (Retry-After)")
				body := testenv.Metrics(g, f.managerMetrics, testenv.MetricsReaderToken(t, f.mgmt, "fleet-manager-metrics-reader"))
				g.Expect(body).To(ContainSubstring("fleeet_"))
				return fmt.Sprintf("answered %v (status: count); Prometheus's scrape from its own address was served at once", counts)
			}},
		{"read-manager-readiness", anyone, "GET http://<manager health>/readyz?verbose and /healthz?verbose", func(t *testing.T, g Gomega) string {
			code, ready := testenv.Get(g, "http://"+f.managerHealth+"/readyz?verbose")
			g.Expect(code).To(Equal(http.StatusOK))
			g.Expect(ready).To(ContainSubstring("[+]user-policies ok"), "ready only with the user policies loaded")
			_, health := testenv.Get(g, "http://"+f.managerHealth+"/healthz?verbose")
			for _, body := range []string{ready, health} {
				for _, name := range []string{tenantA, tenantB, tenantC, "edge", "fleeet_"} {
					g.Expect(body).NotTo(ContainSubstring(name))
				}
			}
			return oneLine(ready)
		}},
	}
}
