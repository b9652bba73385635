package adversarial_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleeet-dev/fleeet/internal/fleetctl"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// dashboardSessionMaxAge is the login sessions' lifetime in the dashboard
// the attacks run against: short, so that expiry can be watched.
const dashboardSessionMaxAge = 5 * time.Second

// dashboard is the in-cluster dashboard under attack, run the way the
// manager chart runs it: the chart's Deployment arguments, as the chart's
// dashboard ServiceAccount, serving HTTPS.
type dashboard struct {
	base   string
	client *http.Client
	// reader is a bearer token of a ServiceAccount of team-a that may read
	// team-a's fleet and nothing of team-b's.
	reader string
}

func startDashboard(t *testing.T, f *fleet) *dashboard {
	g := NewWithT(t)
	ctx := t.Context()
	rel := testenv.ChartOf(t, "fleet-manager").Template(t, "fleet-manager", managerNamespace, map[string]any{
		"management": map[string]any{"url": f.mgmt.Config.Host},
		"dashboard":  map[string]any{"enabled": true},
	})
	// The chart's dashboard identity: its ServiceAccount and ClusterRole.
	for _, o := range testenv.Objects(t, rel) {
		if o.GetName() == "fleet-manager-dashboard" && map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true}[o.GetKind()] {
			g.Expect(f.mgmt.Client.Create(ctx, o)).To(Succeed())
		}
	}
	certDir, caPEM := testenv.ServingCertificate(t)
	addr := testenv.FreeAddr(t)
	p := testenv.RunDeployment(t, f.mgmt, rel, "fleet-manager-dashboard", testenv.BuildCommand(t, "fleet-manager", testenv.TestVersion), map[string]string{
		"address": addr, "tls-cert-file": certDir + "/tls.crt", "tls-key-file": certDir + "/tls.key",
		"session-max-age": dashboardSessionMaxAge.String(),
	})
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	g.Expect(p.WaitHTTP(waitCtx, "https://"+addr+"/readyz")).To(Succeed())

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	d := &dashboard{base: "https://" + addr, client: &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	g.Expect(f.mgmt.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "dashboard-reader"}})).To(Succeed())
	g.Expect(f.mgmt.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "dashboard-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"fleeet.dev"}, Resources: []string{"modules", "remotes", "proxyassemblages"}, Verbs: []string{"list", "watch"}}}})).To(Succeed())
	g.Expect(f.mgmt.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "dashboard-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "dashboard-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tenantA, Name: "dashboard-reader"}}})).To(Succeed())
	d.reader = mint(t, f.mgmt, tenantA, "dashboard-reader")
	return d
}

// do sends a request to the dashboard with the given headers, as name,
// value pairs, and returns the response with its body read.
func (d *dashboard) do(g Gomega, method, path string, body io.Reader, header ...string) (*http.Response, string) {
	req, err := http.NewRequest(method, d.base+path, body)
	g.Expect(err).NotTo(HaveOccurred())
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := d.client.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return resp, string(b)
}

// login posts the reader's token to the login form and returns the cookie
// the dashboard sets.
func (d *dashboard) login(g Gomega) *http.Cookie {
	resp, _ := d.do(g, http.MethodPost, "/login", strings.NewReader(url.Values{"token": {d.reader}, "namespace": {tenantA}}.Encode()),
		"Content-Type", "application/x-www-form-urlencoded")
	g.Expect(resp.StatusCode).To(Equal(http.StatusSeeOther))
	g.Expect(resp.Cookies()).To(HaveLen(1))
	return resp.Cookies()[0]
}

func (d *dashboard) grid(g Gomega, ns string, cookie *http.Cookie) int {
	resp, _ := d.do(g, http.MethodGet, "/namespaces/"+ns+"/", nil, "Cookie", cookie.Name+"="+cookie.Value)
	return resp.StatusCode
}

// dashboardAttacks attack the web dashboard: the in-cluster one the
// manager chart runs, started here for the rest of t, and fleetctl's local
// one. The token flood comes last: it spends the attacking address's
// allowance of TokenReviews.
func dashboardAttacks(t *testing.T, f *fleet) []attack {
	d := startDashboard(t, f)
	const network = "unauthenticated network client of the dashboard"
	const readerID = "ServiceAccount team-a/dashboard-reader (list/watch team-a's fleet), through a browser"
	return []attack{
		{
			name: "chart-dashboard-serves-tls-by-default", identity: "operator installing the chart with dashboard.enabled=true",
			request: "helm template fleet-manager --set dashboard.enabled=true",
			try: func(t *testing.T, g Gomega) string {
				rel := testenv.ChartOf(t, "fleet-manager").Template(t, "fleet-manager", managerNamespace, map[string]any{
					"management": map[string]any{"url": "https://management.example.com:6443"},
					"dashboard":  map[string]any{"enabled": true},
				})
				var args []any
				var port string
				var certificate bool
				for _, o := range testenv.Objects(t, rel) {
					switch {
					case o.GetKind() == "Deployment" && o.GetName() == "fleet-manager-dashboard":
						cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
						args, _, _ = unstructured.NestedSlice(cs[0].(map[string]any), "args")
					case o.GetKind() == "Service" && o.GetName() == "fleet-manager-dashboard":
						ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
						port = fmt.Sprint(ports[0].(map[string]any)["port"])
					case o.GetKind() == "Certificate" && o.GetName() == "fleet-manager-dashboard",
						o.GetKind() == "Secret" && o.GetName() == "fleet-manager-dashboard-tls":
						certificate = true
					}
				}
				g.Expect(args).To(ContainElement("--tls-cert-file=/etc/fleet-dashboard/tls/tls.crt"), "the dashboard serves HTTPS")
				g.Expect(args).NotTo(ContainElement("--insecure-plain-http"))
				g.Expect(port).To(Equal("443"))
				g.Expect(certificate).To(BeTrue(), "the chart makes the certificate")
				return fmt.Sprintf("the default dashboard serves HTTPS on Service port %s from a certificate the chart makes: %v", port, args)
			},
		},
		{
			name: "local-dashboard-beyond-loopback", identity: "fleetctl user with the cluster's admin kubeconfig",
			request: "fleetctl dashboard --address 0.0.0.0:0 (would serve the admin's view to the network)",
			try: func(t *testing.T, g Gomega) string {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				cmd := fleetctl.NewCommand()
				cmd.SetOut(io.Discard)
				cmd.SetErr(io.Discard)
				cmd.SetArgs([]string{"--kubeconfig", f.mgmt.Kubeconfig, "--namespace", tenantA, "dashboard", "--address", "0.0.0.0:0"})
				err := cmd.ExecuteContext(ctx)
				g.Expect(err).To(MatchError(ContainSubstring("beyond loopback")), "it served")
				return err.Error()
			},
		},
		{
			name: "local-dashboard-dns-rebinding", identity: "web page of another site, its DNS name rebound to 127.0.0.1",
			request: "GET / of fleetctl dashboard with Host: rebound.example.com",
			try: func(t *testing.T, g Gomega) string {
				ctx, cancel := context.WithCancel(t.Context())
				out := &strings.Builder{}
				cmd := fleetctl.NewCommand()
				w := &syncWriter{w: out}
				cmd.SetOut(w)
				cmd.SetErr(io.Discard)
				cmd.SetArgs([]string{"--kubeconfig", f.mgmt.Kubeconfig, "--namespace", tenantA, "dashboard", "--address", "127.0.0.1:0"})
				done := make(chan struct{})
				go func() { defer close(done); _ = cmd.ExecuteContext(ctx) }()
				defer func() { cancel(); <-done }()
				var base string
				g.Eventually(func() string {
					_, rest, _ := strings.Cut(w.String(), "fleet on ")
					base, _, _ = strings.Cut(rest, " ")
					return base
				}).Should(HavePrefix("http://127.0.0.1:"))
				req, err := http.NewRequest(http.MethodGet, base, nil)
				g.Expect(err).NotTo(HaveOccurred())
				req.Host = "rebound.example.com" + strings.TrimSuffix(strings.TrimPrefix(base, "http://127.0.0.1"), "/")
				resp, err := http.DefaultClient.Do(req)
				g.Expect(err).NotTo(HaveOccurred())
				resp.Body.Close()
				g.Expect(resp.StatusCode).To(Equal(http.StatusMisdirectedRequest))
				return fmt.Sprintf("%d for Host %s", resp.StatusCode, req.Host)
			},
		},
		{
			name: "session-cookie-holds-no-token", identity: readerID,
			request: "POST /login with the reader's token; read the Set-Cookie",
			try: func(t *testing.T, g Gomega) string {
				cookie := d.login(g)
				g.Expect(strings.Contains(cookie.Value, d.reader)).To(BeFalse(), "the cookie holds the bearer token")
				g.Expect(cookie.HttpOnly).To(BeTrue())
				g.Expect(cookie.Secure).To(BeTrue())
				g.Expect(cookie.SameSite).To(Equal(http.SameSiteStrictMode))
				g.Expect(cookie.MaxAge).To(BeNumerically("<=", 3600))
				g.Expect(d.grid(g, tenantA, cookie)).To(Equal(http.StatusOK), "the session works")
				return fmt.Sprintf("cookie %s: %d-character session id, HttpOnly, Secure, SameSite=Strict, Max-Age=%d", cookie.Name, len(cookie.Value), cookie.MaxAge)
			},
		},
		{
			name: "logged-out-session-replayed", identity: readerID + ", its cookie copied before logout",
			request: "POST /logout, then GET /namespaces/team-a/ with the copied cookie",
			try: func(t *testing.T, g Gomega) string {
				cookie := d.login(g)
				g.Expect(d.grid(g, tenantA, cookie)).To(Equal(http.StatusOK))
				resp, _ := d.do(g, http.MethodPost, "/logout", nil, "Cookie", cookie.Name+"="+cookie.Value)
				g.Expect(resp.StatusCode).To(Equal(http.StatusSeeOther))
				status := d.grid(g, tenantA, cookie)
				g.Expect(status).To(Equal(http.StatusUnauthorized))
				return fmt.Sprintf("%d after logout", status)
			},
		},
		{
			name: "expired-session-replayed", identity: readerID + ", its cookie kept past the session's lifetime",
			request: fmt.Sprintf("GET /namespaces/team-a/ with a session cookie older than --session-max-age=%s", dashboardSessionMaxAge),
			try: func(t *testing.T, g Gomega) string {
				cookie := d.login(g)
				g.Expect(d.grid(g, tenantA, cookie)).To(Equal(http.StatusOK))
				g.Eventually(func(g Gomega) int { return d.grid(g, tenantA, cookie) }, 4*dashboardSessionMaxAge, time.Second).
					Should(Equal(http.StatusUnauthorized))
				return "401 once the session's lifetime passed"
			},
		},
		{
			name: "forged-session-cookie", identity: network,
			request: "GET /namespaces/team-a/ with a random session id, and with a raw bearer token as the cookie (the old cookie's form)",
			try: func(t *testing.T, g Gomega) string {
				random := make([]byte, 32)
				_, _ = rand.Read(random)
				var outcomes []string
				for _, c := range []*http.Cookie{
					{Name: "fleeet-dashboard-session", Value: hex.EncodeToString(random)},
					{Name: "fleeet-dashboard-session", Value: d.reader},
					{Name: "fleeet-dashboard-token", Value: d.reader},
				} {
					status := d.grid(g, tenantA, c)
					g.Expect(status).To(Equal(http.StatusUnauthorized), "cookie %s", c.Name)
					outcomes = append(outcomes, fmt.Sprintf("%s: %d", c.Name, status))
				}
				return strings.Join(outcomes, ", ")
			},
		},
		{
			name: "tenant-reads-another-namespace", identity: readerID,
			request: "GET /namespaces/team-b/ and its Remote page with the team-a reader's session",
			try: func(t *testing.T, g Gomega) string {
				cookie := d.login(g)
				g.Expect(d.grid(g, tenantA, cookie)).To(Equal(http.StatusOK))
				resp, body := d.do(g, http.MethodGet, "/namespaces/"+tenantB+"/remotes/edge", nil, "Cookie", cookie.Name+"="+cookie.Value)
				g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
				g.Expect(body).To(ContainSubstring("may not list modules in namespace " + tenantB))
				g.Expect(body).NotTo(ContainSubstring("Connected"), "nothing of the Remote's page")
				return fmt.Sprintf("%d: %s", resp.StatusCode, "may not list modules in namespace "+tenantB)
			},
		},
		{
			name: "token-review-flood", identity: network,
			request: "300 requests, each with a new random bearer token, from one address",
			try: func(t *testing.T, g Gomega) string {
				reviewed, limited := 0, 0
				for range 300 {
					token := make([]byte, 24)
					_, _ = rand.Read(token)
					resp, _ := d.do(g, http.MethodGet, "/namespaces/"+tenantA+"/", nil, "Authorization", "Bearer "+hex.EncodeToString(token),
						"X-Forwarded-For", fmt.Sprintf("198.51.100.%d", reviewed+limited))
					switch resp.StatusCode {
					case http.StatusUnauthorized:
						reviewed++ // a token never seen before: the apiserver reviewed it
					case http.StatusTooManyRequests:
						limited++
						g.Expect(resp.Header.Get("Retry-After")).NotTo(BeEmpty())
					default:
						g.Expect(resp.StatusCode).To(BeElementOf(http.StatusUnauthorized, http.StatusTooManyRequests))
					}
				}
				g.Expect(reviewed).To(BeNumerically("<=", 20), "TokenReviews sent to the apiserver")
				return fmt.Sprintf("%d tokens reviewed, %d answered 429 with Retry-After", reviewed, limited)
			},
		},
	}
}

// syncWriter is an io.Writer safe for one writer and one reader.
type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
