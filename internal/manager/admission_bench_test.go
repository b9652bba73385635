package manager_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
		metrics := testenv.FreeAddr(b)
		testenv.StartManagerProcess(b, bin, c, "--metrics-bind-address="+metrics)
		token := testenv.MetricsReaderToken(b, c, "")
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
				before := webhookHistogram(b, metrics, token)
				p50, p99 := measure(clients)
				out[clients] = [2]time.Duration{p50, p99}
				b.ReportMetric(float64(p50.Microseconds())/1000, fmt.Sprintf("%s-c%d-p50-ms", label, clients))
				b.ReportMetric(float64(p99.Microseconds())/1000, fmt.Sprintf("%s-c%d-p99-ms", label, clients))
				if label != "webhook" {
					continue
				}
				// The webhook's own time, from its exported histogram: what
				// the apiserver waited for the decision, without the
				// apiserver's own work on the request.
				served := webhookHistogram(b, metrics, token).since(before)
				if served.count() < admissionCreates {
					b.Fatalf("the webhook histogram counted %d Module requests, want %d", served.count(), admissionCreates)
				}
				b.ReportMetric(served.quantile(0.5)*1000, fmt.Sprintf("server-c%d-p50-ms", clients))
				b.ReportMetric(served.quantile(0.99)*1000, fmt.Sprintf("server-c%d-p99-ms", clients))
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

// histogram is a cumulative Prometheus histogram: upper bounds and counts.
type histogram struct {
	bounds []float64
	counts []uint64
}

// webhookHistogram scrapes the manager's fleeet_admission_duration_seconds
// for Modules, as the holder of token, a metrics reader.
func webhookHistogram(b *testing.B, addr, token string) histogram {
	b.Helper()
	body := testenv.Metrics(NewWithT(b), addr, token)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	family, ok := families["fleeet_admission_duration_seconds"]
	if !ok {
		return histogram{}
	}
	for _, m := range family.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() != "kind" || l.GetValue() != "Module" {
				continue
			}
			var h histogram
			for _, bucket := range m.GetHistogram().GetBucket() {
				h.bounds = append(h.bounds, bucket.GetUpperBound())
				h.counts = append(h.counts, bucket.GetCumulativeCount())
			}
			h.bounds = append(h.bounds, math.Inf(1))
			h.counts = append(h.counts, m.GetHistogram().GetSampleCount())
			return h
		}
	}
	return histogram{}
}

// since returns the observations made after earlier was scraped.
func (h histogram) since(earlier histogram) histogram {
	out := histogram{bounds: h.bounds, counts: slices.Clone(h.counts)}
	for i := range earlier.counts {
		out.counts[i] -= earlier.counts[i]
	}
	return out
}

func (h histogram) count() uint64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// quantile estimates the q-quantile the way PromQL's histogram_quantile
// does: linear interpolation inside the bucket that holds it.
func (h histogram) quantile(q float64) float64 {
	rank := q * float64(h.count())
	lower, below := 0.0, uint64(0)
	for i, upper := range h.bounds {
		if float64(h.counts[i]) >= rank {
			if math.IsInf(upper, 1) {
				return lower
			}
			inBucket := h.counts[i] - below
			return lower + (upper-lower)*(rank-float64(below))/float64(inBucket)
		}
		lower, below = upper, h.counts[i]
	}
	return lower
}
