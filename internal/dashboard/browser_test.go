package dashboard_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleetviewtest"
)

// browser starts Debian's headless Chromium (make setup installs it) for
// the test and returns its context.
func browser(t testing.TB) context.Context {
	path, err := exec.LookPath("chromium-headless-shell")
	if err != nil {
		path, err = exec.LookPath("chromium")
	}
	if err != nil {
		t.Fatal("no chromium-headless-shell or chromium on PATH: run make setup, which installs Debian's chromium-headless-shell")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 720))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return ctx
}

// screenshot writes a page's screenshot to $FLEEET_SCREENSHOTS (the
// docs' images, docs/images, come from there) or the test's temporary directory.
func screenshot(t testing.TB, ctx context.Context, name string) {
	dir := os.Getenv("FLEEET_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)).To(Succeed())
}

// gridText reads the grid's rows as a browser renders them.
const gridText = `Array.from(document.querySelectorAll('#grid tr')).map(r => r.innerText.replace(/\s+/g, ' ').trim())`

func TestTheDashboardInABrowserUpdatesWithoutReload(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.Fleet(t, cluster)
	base := startDashboard(t, ns)
	ctx := browser(t)
	// The first action starts the browser: no timeout on it (chromedp.Run).
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#grid")))).To(Succeed())

	grid := func() []string {
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](gridText))
		g.Expect(err).NotTo(HaveOccurred())
		return rows
	}
	g.Eventually(func() []string {
		g.Expect(chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#grid")))).To(Succeed())
		return grid()
	}, fleetviewtest.Timeout, time.Second).Should(Equal([]string{
		"Remote app@v1.0.0 crds@v1.0.0",
		"edge-1 blocked v1.0.0 ready v1.0.0 2/2 pods",
		"edge-2 offline v1.0.0 offline v1.0.0",
		"lab failed v1.0.0 0/2 pods CrashLoopBackOff -",
	}), "the grid as the browser shows it is fleetctl status")
	screenshot(t, ctx, "dashboard-fleet")

	// The Remote's dependency graph: app's edge to crds, which it waits
	// for, is the highlighted one, drawn as wide as the browser shows it. (Before
	// the change below, which makes the reports of edge-1's plan stale.)
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(base+"/remotes/edge-1"), chromedp.WaitVisible(chromedp.CSS("svg.graph")))).To(Succeed())
	blocking, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('svg.graph line.blocking')).map(l => l.textContent + ' ' + getComputedStyle(l).strokeWidth)`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(blocking).To(Equal([]string{"app waits for crds 3px"}))
	screenshot(t, ctx, "dashboard-remote")
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#grid")))).To(Succeed())

	// A Module change reaches the open page by itself.
	origin := func() float64 {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`performance.timeOrigin`))
		g.Expect(err).NotTo(HaveOccurred())
		return v
	}
	loaded := origin()
	g.Expect(cluster.Client.Patch(t.Context(), &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "crds"}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"sync":{"source":{"git":{"tag":"v1.1.0"}}}}}`)))).To(Succeed())
	g.Eventually(func() string { return grid()[0] }, 20*time.Second, 200*time.Millisecond).Should(Equal("Remote app@v1.0.0 crds@v1.1.0"))
	g.Expect(origin()).To(Equal(loaded), "the page was not reloaded")

	for name, path := range map[string]string{"dashboard-module": "/modules/app", "dashboard-cell": "/cells/app/lab"} {
		g.Expect(chromedp.Do(ctx, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("#live")))).To(Succeed())
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#live")))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.TrimSpace(text)).NotTo(BeEmpty(), path)
		screenshot(t, ctx, name)
	}

}
