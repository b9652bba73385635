package dashboard_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleetviewtest"
)

// BenchmarkDashboard measures, in headless Chromium, the dashboard of a
// fleet of 1,000 Remotes × 50 Modules: the load of the grid page (its
// first 100 Remotes, as served by default, and all 1,000 on one page), and
// the time from a Module's version change (the patch returning) to the
// new version in the open page's grid.
func BenchmarkDashboard(b *testing.B) {
	ns := fleetviewtest.BenchFleet(b, cluster, fleetviewtest.BenchRemotes, 50)
	base := startDashboard(b, ns)
	ctx := browser(b)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		b.Fatal(err)
	}
	header := func() string {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#grid tr th:nth-child(2)').innerText`))
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	tag := 1
	var allRows, page, update time.Duration
	for b.Loop() {
		start := time.Now()
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/?rows=1000"), chromedp.WaitVisible(chromedp.CSS("#grid"))); err != nil {
			b.Fatal(err)
		}
		allRows += time.Since(start)
		start = time.Now()
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#grid"))); err != nil {
			b.Fatal(err)
		}
		page += time.Since(start)

		tag++
		want := "module-00@v1." + string(rune('0'+tag)) + ".0"
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"sync":{"source":{"git":{"tag":"v1.`+string(rune('0'+tag))+`.0"}}}}}`))
		start = time.Now()
		if err := cluster.Client.Patch(context.Background(), &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "module-00"}}, patch); err != nil {
			b.Fatal(err)
		}
		for header() != want {
			if time.Since(start) > time.Minute {
				b.Fatalf("the page still shows %s a minute after the change", header())
			}
			time.Sleep(20 * time.Millisecond)
		}
		update += time.Since(start)
	}
	// Means over the iterations.
	b.ReportMetric(allRows.Seconds()/float64(b.N), "all-rows-load-s")
	b.ReportMetric(page.Seconds()/float64(b.N), "page-load-s")
	b.ReportMetric(update.Seconds()/float64(b.N), "update-s")
}
