package dashboard_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/dashboard"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleetviewtest"
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(fleetviewtest.RunWithManager(m, &cluster))
}

// command returns the dashboard command as fleetctl serves it, under
// kubectl's kubeconfig flags, connecting to the test cluster's namespace
// ns with args.
func command(ns string, args ...string) *cobra.Command {
	kube := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{Use: "fleetctl", SilenceUsage: true}
	kube.AddFlags(root.PersistentFlags())
	root.AddCommand(dashboard.NewCommand(kube))
	root.SetArgs(append([]string{"--kubeconfig", cluster.Kubeconfig, "--namespace", ns, "dashboard"}, args...))
	return root
}

// lockedBuffer is a bytes.Buffer safe for one writer and one reader.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startDashboard runs the dashboard on a free port until the test ends
// and returns its base URL.
func startDashboard(t testing.TB, ns string, args ...string) string {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := command(ns, append([]string{"--address", "127.0.0.1:0"}, args...)...)
	out := &lockedBuffer{}
	cmd.SetOut(out)
	cmd.SetErr(out)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cmd.ExecuteContext(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	var base string
	NewWithT(t).Eventually(func() string {
		_, rest, _ := strings.Cut(out.String(), "fleet on ")
		base, _, _ = strings.Cut(rest, " ")
		return base
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(HavePrefix("http://127.0.0.1:"))
	return strings.TrimSuffix(base, "/")
}

// why is fleetctl why's explanation of module on remote in namespace ns,
// from the code fleetctl and the cell page share, without the Module's
// warnings (its last lines).
func why(g Gomega, ns, module, remote string) string {
	f, err := fleetview.Read(context.Background(), cluster.Client, ns)
	g.Expect(err).NotTo(HaveOccurred())
	i := slices.IndexFunc(f.Modules, func(m fleeetv1.Module) bool { return m.Name == module })
	j := slices.IndexFunc(f.Remotes, func(r fleeetv1.Remote) bool { return r.Name == remote })
	g.Expect(i).To(BeNumerically(">=", 0), "Module %s", module)
	g.Expect(j).To(BeNumerically(">=", 0), "Remote %s", remote)
	var out bytes.Buffer
	f.Why(&f.Modules[i], &f.Remotes[j]).Print(&out, ns)
	return out.String()
}

func fetch(g Gomega, url string) string {
	resp, err := http.Get(url)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), string(body))
	return string(body)
}

// rows splits the dashboard's grid into its rows' text, tags dropped.
func rows(html string) []string {
	var out []string
	for _, tr := range strings.Split(html, "<tr")[1:] {
		_, tr, _ = strings.Cut(tr, ">") // the row's own attributes
		tr, _, _ = strings.Cut(tr, "</tr>")
		var text strings.Builder
		inTag := false
		for _, r := range tr {
			switch {
			case r == '<':
				inTag = true
				text.WriteString(" ")
			case r == '>':
				inTag = false
			case !inTag:
				text.WriteRune(r)
			}
		}
		out = append(out, strings.Join(strings.Fields(text.String()), " "))
	}
	return out
}

// A cell of a Module with overrides shows, as fleetctl why does, the
// overrides that pick the Remote and the package its plan holds.
func TestACellShowsItsOverridesAndResolvedPackage(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.Fleet(t, cluster)
	base := startDashboard(t, ns)
	patch := `{"spec":{"overrides":[{"name":"edge","selector":{"matchLabels":{"env":"edge"}},"kustomize":{"substitute":{"SIZE":"large"}}}]}}`
	g.Expect(cluster.Client.Patch(t.Context(), &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "crds"}},
		client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(fetch(g, base+"/cells/crds/edge-1")).To(And(ContainSubstring("  overrides:    edge\n"),
			ContainSubstring("      substitute:\n        SIZE: large\n")))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
}

func TestTheDashboardShowsTheFleetLiveWithTheUsersRights(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.Fleet(t, cluster)
	base := startDashboard(t, ns)
	g.Eventually(func(g Gomega) {
		g.Expect(rows(fetch(g, base+"/"))).To(Equal([]string{
			"Remote app @v1.0.0 crds @v1.0.0",
			"edge-1 blocked v1.0.0 ready v1.0.0 2/2 pods",
			"edge-2 offline v1.0.0 offline v1.0.0",
			"lab failed v1.0.0 0/2 pods CrashLoopBackOff -",
		}), "the rows of fleetctl status")
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	g.Expect(rows(fetch(g, base+"/?state=failed&selector="))).To(HaveLen(2), "the header and lab")
	g.Expect(rows(fetch(g, base+"/?selector=env%3Dedge"))).To(HaveLen(3), "the header and two edge Remotes")
	g.Expect(rows(fetch(g, base+"/?rows=2&page=2"))).To(Equal([]string{"Remote app @v1.0.0 crds @v1.0.0", "lab failed v1.0.0 0/2 pods CrashLoopBackOff -"}),
		"the second page of two Remotes a page")
	g.Expect(fetch(g, base+"/?rows=2")).To(And(ContainSubstring("Remotes 1–2 of 3"), ContainSubstring(`href="?page=2&amp;rows=2"`)))
	g.Expect(fetch(g, base+"/")).To(And(ContainSubstring(`<script src="./static/app.js">`), Not(ContainSubstring("http"+"s://"))),
		"its script is served by the dashboard itself")
	g.Expect(fetch(g, base+"/static/app.js")).To(ContainSubstring("EventSource"))

	g.Expect(fetch(g, base+"/cells/app/lab")).To(ContainSubstring(strings.ReplaceAll(strings.TrimSpace(why(g, ns, "app", "lab")), "'", "&#39;")[:60]),
		"a cell's page is fleetctl why")
	g.Expect(rows(fetch(g, base+"/modules/app"))).To(And(ContainElement("(rest) 3 2 0 1"),
		ContainElement("lab failed v1.0.0 0/2 pods CrashLoopBackOff kustomize build failed")), "its stages and each cluster's state")
	edge1 := fetch(g, base+"/remotes/edge-1")
	g.Expect(rows(edge1)).To(ContainElement(HavePrefix("crds ready v1.0.0 2/2 pods")))
	g.Expect(edge1).To(ContainSubstring(`<line class="edge blocking"`), "the graph highlights what app waits for")
	g.Expect(edge1).To(ContainSubstring("<title>app waits for crds</title>"))
	g.Expect(edge1).To(MatchRegexp(`<g class="node blocked"><rect [^>]*/><text [^>]*>app</text>`))

	// A Remote's page shows the cluster's Flux, and what is wrong with it.
	lab := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lab"}}
	g.Expect(status.Apply(t.Context(), cluster.Client, lab, status.AgentManager, map[string]any{
		"flux": fleeetv1.FluxStatus{Version: "v2.0.0"},
		"conditions": []metav1.Condition{{Type: fleeetv1.FluxCompatibleCondition, Status: metav1.ConditionFalse,
			Reason: fleeetv1.ReasonFluxMissing, Message: "CustomResourceDefinition helmreleases.helm.toolkit.fluxcd.io is not installed",
			LastTransitionTime: metav1.Now()}},
	})).To(Succeed())
	g.Eventually(func(g Gomega) string { return fetch(g, base+"/remotes/lab") }, fleetviewtest.Timeout, fleetviewtest.Poll).Should(And(
		ContainSubstring("; Flux v2.0.0</p>"),
		ContainSubstring(`<p class="failed">FluxMissing: CustomResourceDefinition helmreleases.helm.toolkit.fluxcd.io is not installed</p>`)))

	// A change arrives as an event that carries the changed parts: the
	// header row with the new version, not the rows that stayed.
	page := fetch(g, base+"/")
	_, shown, _ := strings.Cut(page, `data-shown="`)
	shown, _, _ = strings.Cut(shown, `"`)
	resp, err := http.Get(base + "/events?src=&shown=" + shown)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))
	events := bufio.NewReader(resp.Body)
	line, err := events.ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal(": watching\n"))
	g.Expect(cluster.Client.Patch(t.Context(), &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "crds"}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"sync":{"source":{"git":{"tag":"v1.1.0"}}}}}`)))).To(Succeed())
	received := make(chan string, 1)
	go func() {
		for {
			l, err := events.ReadString('\n')
			if err != nil || strings.HasPrefix(l, "data: ") {
				received <- l
				return
			}
		}
	}()
	var event string
	g.Eventually(received, 10*time.Second).Should(Receive(&event))
	var update struct{ Parts []struct{ ID, HTML string } }
	g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(event, "data: ")), &update)).To(Succeed(), event)
	g.Expect(update.Parts).NotTo(BeEmpty())
	g.Expect(update.Parts[0].ID).To(Equal("head"), "the first change is the header's version")
	g.Expect(rows(update.Parts[0].HTML)).To(Equal([]string{"Remote app @v1.0.0 crds @v1.1.0"}))
	g.Expect(rows(fetch(g, base+"/"))[0]).To(Equal("Remote app @v1.0.0 crds @v1.1.0"))

	// A page of another site that reaches the dashboard through a DNS
	// name rebound to this machine is refused.
	rebound, err := http.NewRequest(http.MethodGet, base+"/", nil)
	g.Expect(err).NotTo(HaveOccurred())
	rebound.Host = "rebound.example.com" + strings.TrimPrefix(base, "http://127.0.0.1")
	refused, err := http.DefaultClient.Do(rebound)
	g.Expect(err).NotTo(HaveOccurred())
	refused.Body.Close()
	g.Expect(refused.StatusCode).To(Equal(http.StatusMisdirectedRequest))

	// Someone without rights to the namespace sees nothing of it.
	nobody := startDashboard(t, ns, "--as", "nobody")
	denied := fetch(g, nobody+"/")
	g.Expect(denied).To(ContainSubstring("forbidden"))
	g.Expect(denied).NotTo(ContainSubstring("edge-1"))
	resp2, err := http.Get(nobody + "/events?src=")
	g.Expect(err).NotTo(HaveOccurred())
	resp2.Body.Close()
	g.Expect(resp2.StatusCode).To(Equal(http.StatusForbidden))
}

func TestTheInClusterDashboardAuthorisesEveryCallerAsThemselves(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := fleetviewtest.Fleet(t, cluster)
	// The dashboard runs as the cluster's administrator here: whatever a
	// caller sees comes from the caller's own rights.
	base := startDashboard(t, "default", "--in-cluster")

	for _, name := range []string{"reader", "stranger"} {
		g.Expect(cluster.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	}
	g.Expect(cluster.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-reader"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{fleeetv1.GroupVersion.Group}, Resources: []string{"modules", "remotes", "proxyassemblages"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}},
		},
	})).To(Succeed())
	g.Expect(cluster.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "fleet-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "reader"}},
	})).To(Succeed())
	reader, stranger := testenv.ServiceAccountToken(t, cluster, ns, "reader"), testenv.ServiceAccountToken(t, cluster, ns, "stranger")

	get := func(g Gomega, path string, header ...string) (int, string) {
		return testenv.Get(g, base+path, header...)
	}
	grid := "/namespaces/" + ns + "/"

	status, body := get(g, grid)
	g.Expect(status).To(Equal(http.StatusUnauthorized), "no token")
	g.Expect(body).To(And(ContainSubstring(`name="token"`), Not(ContainSubstring("edge-1"))))
	status, _ = get(g, grid+"events?src=")
	g.Expect(status).To(Equal(http.StatusUnauthorized), "no token, live events")
	status, body = get(g, grid, "Authorization", "Bearer not-a-token")
	g.Expect(status).To(Equal(http.StatusUnauthorized), "a token the apiserver does not know")
	g.Expect(body).NotTo(ContainSubstring("not-a-token"), "the token is not echoed")

	status, body = get(g, grid, "Authorization", "Bearer "+stranger)
	g.Expect(status).To(Equal(http.StatusForbidden), "a token without rights to the namespace")
	g.Expect(body).To(And(ContainSubstring("system:serviceaccount:"+ns+":stranger may not list modules in namespace "+ns), Not(ContainSubstring("edge-1"))))
	status, _ = get(g, grid+"cells/app/lab", "Authorization", "Bearer "+stranger)
	g.Expect(status).To(Equal(http.StatusForbidden))

	g.Eventually(func(g Gomega) {
		status, body := get(g, grid, "Authorization", "Bearer "+reader)
		g.Expect(status).To(Equal(http.StatusOK))
		g.Expect(rows(body)).To(Equal([]string{
			"Remote app @v1.0.0 crds @v1.0.0",
			"edge-1 blocked v1.0.0 ready v1.0.0 2/2 pods",
			"edge-2 offline v1.0.0 offline v1.0.0",
			"lab failed v1.0.0 0/2 pods CrashLoopBackOff -",
		}), "the reader sees the namespace's grid")
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	status, body = get(g, "/namespaces/default/", "Authorization", "Bearer "+reader)
	g.Expect(status).To(Equal(http.StatusForbidden), "the reader's rights end at its namespace: %s", body)

	// A browser logs in with the form, naming the namespace to open; an
	// HTTP-only, same-site cookie holds a session's random identifier,
	// never the token. A token without rights to the namespace gets no
	// session, and a login posted from another site is refused.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm(base+"/login", url.Values{"token": {stranger}, "namespace": {ns}})
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
	g.Expect(resp.Cookies()).To(BeEmpty())
	form := url.Values{"token": {reader}, "namespace": {ns}}
	resp, err = noRedirect.PostForm(base+"/login", form)
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusSeeOther))
	g.Expect(resp.Header.Get("Location")).To(Equal("/namespaces/" + ns + "/"))
	cookies := resp.Cookies()
	g.Expect(cookies).To(HaveLen(1))
	g.Expect(cookies[0].HttpOnly).To(BeTrue())
	g.Expect(cookies[0].SameSite).To(Equal(http.SameSiteStrictMode))
	g.Expect(strings.Contains(cookies[0].Value, reader)).To(BeFalse(), "the cookie holds the token")
	status, body = get(g, grid+"remotes/edge-1", "Cookie", cookies[0].Name+"="+cookies[0].Value)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring("<title>app waits for crds</title>"))
	req, err := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(form.Encode()))
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = noRedirect.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
	g.Expect(resp.Cookies()).To(BeEmpty())

	// Logging out ends the session: the same cookie opens nothing after.
	req, err = http.NewRequest(http.MethodPost, base+"/logout", nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.AddCookie(cookies[0])
	resp, err = noRedirect.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusSeeOther))
	status, _ = get(g, grid, "Cookie", cookies[0].Name+"="+cookies[0].Value)
	g.Expect(status).To(Equal(http.StatusUnauthorized), "the logged-out session's cookie")

	// Rights taken away stop working within the reviews' 10 s reuse.
	g.Expect(cluster.Client.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-reader"}})).To(Succeed())
	g.Eventually(func(g Gomega) int {
		status, _ := get(g, grid, "Authorization", "Bearer "+reader)
		return status
	}, 30*time.Second, time.Second).Should(Equal(http.StatusForbidden))
}

func TestTheLocalDashboardRefusesAnAddressBeyondLoopback(t *testing.T) {
	g := NewWithT(t)
	ns := cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	serve := func(args ...string) error {
		// A dashboard that serves is stopped after a while, and returns nil.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		cmd := command(ns, args...)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		return cmd.ExecuteContext(ctx)
	}
	g.Expect(serve("--address", "0.0.0.0:0")).To(MatchError(And(ContainSubstring("beyond loopback"), ContainSubstring("--insecure-expose-my-credentials"))))
	g.Expect(serve("--in-cluster", "--address", "0.0.0.0:0")).To(MatchError(ContainSubstring("--insecure-plain-http")), "in-cluster without TLS beyond loopback")
}
