package fleetctl_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetctl"
)

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

// startDashboard runs fleetctl dashboard on a free port until the test
// ends and returns its base URL.
func startDashboard(t testing.TB, ns string, args ...string) string {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := fleetctl.NewCommand()
	out := &lockedBuffer{}
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs(append([]string{"--kubeconfig", cluster.Kubeconfig, "--namespace", ns, "dashboard", "--address", "127.0.0.1:0"}, args...))
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
	}, timeout, poll).Should(HavePrefix("http://127.0.0.1:"))
	return base
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

func TestTheDashboardShowsTheFleetLiveWithTheUsersRights(t *testing.T) {
	g := NewWithT(t)
	ns := fleet(t)
	base := startDashboard(t, ns)
	g.Eventually(func(g Gomega) {
		g.Expect(rows(fetch(g, base+"/"))).To(Equal([]string{
			"Remote app @v1.0.0 crds @v1.0.0",
			"edge-1 blocked v1.0.0 ready v1.0.0 2/2 pods",
			"edge-2 offline v1.0.0 offline v1.0.0",
			"lab failed v1.0.0 0/2 pods CrashLoopBackOff -",
		}), "the rows of fleetctl status")
	}, timeout, poll).Should(Succeed())
	g.Expect(rows(fetch(g, base+"/grid?state=failed&selector="))).To(HaveLen(2), "the header and lab")
	g.Expect(rows(fetch(g, base+"/grid?selector=env%3Dedge"))).To(HaveLen(3), "the header and two edge Remotes")
	g.Expect(fetch(g, base+"/")).To(And(ContainSubstring(`<script src="./static/app.js">`), Not(ContainSubstring("http"+"s://"))),
		"its script is served by the dashboard itself")
	g.Expect(fetch(g, base+"/static/app.js")).To(ContainSubstring("EventSource"))

	why, err := run(t, ns, "why", "app", "--remote", "lab")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fetch(g, base+"/cells/app/lab")).To(ContainSubstring(strings.ReplaceAll(strings.TrimSpace(why), "'", "&#39;")[:60]),
		"a cell's page is fleetctl why")
	g.Expect(rows(fetch(g, base+"/modules/app"))).To(ContainElement("(rest) 3 2 0 1"))
	g.Expect(rows(fetch(g, base+"/remotes/edge-1"))).To(ContainElement(HavePrefix("crds ready v1.0.0 2/2 pods")))

	// A change arrives as an event, and the grid fragment shows it.
	resp, err := http.Get(base + "/events")
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
	g.Eventually(received, 10*time.Second).Should(Receive(Equal("data: changed\n")))
	g.Expect(rows(fetch(g, base+"/grid"))[0]).To(Equal("Remote app @v1.0.0 crds @v1.1.0"))

	// Someone without rights to the namespace sees nothing of it.
	nobody := startDashboard(t, ns, "--as", "nobody")
	page := fetch(g, nobody+"/")
	g.Expect(page).To(ContainSubstring("forbidden"))
	g.Expect(page).NotTo(ContainSubstring("edge-1"))
	resp2, err := http.Get(nobody + "/events")
	g.Expect(err).NotTo(HaveOccurred())
	resp2.Body.Close()
	g.Expect(resp2.StatusCode).To(Equal(http.StatusForbidden))
}
