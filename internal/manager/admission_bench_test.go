package manager_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// admissionCreates is how many Modules each measurement creates.
const admissionCreates = 500

// BenchmarkAdmission measures the latency of Module creates against a real
// apiserver with the fleet-manager binary's policy webhook registered and,
// in the same run, after the webhook configuration is deleted, at 1 and 50
// concurrent clients. Run it with `make bench`.
func BenchmarkAdmission(b *testing.B) {
	bin := testenv.BuildCommand(b, "fleet-manager", "bench")
	for b.Loop() {
		c := testenv.StartCluster(b, "management", testenv.WithWebhooks())
		startManagerProcess(b, bin, c)
		ns := tenantIn(b, c)
		var seq atomic.Int64
		measure := func(clients int) (p50, p99 time.Duration) {
			latencies := make([]time.Duration, admissionCreates)
			var wg sync.WaitGroup
			next := make(chan int)
			for range clients {
				wg.Go(func() {
					for i := range next {
						m := moduleIn(ns, fmt.Sprintf("m-%06d", seq.Add(1)), nil)
						start := time.Now()
						if err := c.Client.Create(b.Context(), m); err != nil {
							b.Error(err)
						}
						latencies[i] = time.Since(start)
					}
				})
			}
			for i := range admissionCreates {
				next <- i
			}
			close(next)
			wg.Wait()
			slices.Sort(latencies)
			return percentile(latencies, 50), percentile(latencies, 99)
		}
		report := func(label string) map[int][2]time.Duration {
			out := map[int][2]time.Duration{}
			for _, clients := range []int{1, 50} {
				measure(clients) // warm up connections and caches
				p50, p99 := measure(clients)
				out[clients] = [2]time.Duration{p50, p99}
				b.ReportMetric(float64(p50.Microseconds())/1000, fmt.Sprintf("%s-c%d-p50-ms", label, clients))
				b.ReportMetric(float64(p99.Microseconds())/1000, fmt.Sprintf("%s-c%d-p99-ms", label, clients))
			}
			return out
		}
		with := report("webhook")
		hook := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "fleet-manager"}}
		if err := c.Client.Delete(b.Context(), hook); err != nil {
			b.Fatal(err)
		}
		// The apiserver drops the webhook from its dispatch list shortly
		// after: a Module the versions policy refuses gets through then.
		waitFor(b, time.Minute, "the webhook to stop judging", func() bool {
			probe := moduleIn(ns, "probe", func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "latest" })
			return c.Client.Create(b.Context(), probe) == nil
		})
		without := report("none")
		for _, clients := range []int{1, 50} {
			b.ReportMetric(float64(with[clients][1])/float64(without[clients][1]), fmt.Sprintf("c%d-p99-ratio", clients))
		}
	}
}
