package manager_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	. "github.com/onsi/gomega"
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
		manager := testenv.StartManagerProcess(b, bin, c, "--metrics-bind-address="+metrics)
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
				before, usedBefore := scrape(b, metrics, token), managerUsage(b, manager.Pid())
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
				after, used := scrape(b, metrics, token), managerUsage(b, manager.Pid()).since(usedBefore)
				served := after.histogram(b, "fleeet_admission_duration_seconds", "kind", "Module").since(before.histogram(b, "fleeet_admission_duration_seconds", "kind", "Module"))
				if served.count() < admissionCreates {
					b.Fatalf("the webhook histogram counted %d Module requests, want %d", served.count(), admissionCreates)
				}
				b.ReportMetric(served.quantile(0.5)*1000, fmt.Sprintf("server-c%d-p50-ms", clients))
				b.ReportMetric(served.quantile(0.99)*1000, fmt.Sprintf("server-c%d-p99-ms", clients))
				// Where the tail comes from: the manager's CPU per request
				// (controllers included), the time its threads waited for a
				// core the kernel gave to another process, the time its
				// goroutines waited for one of its own threads (Go's
				// scheduler latency), and its garbage collector.
				perRequest := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / admissionCreates }
				b.ReportMetric(perRequest(used.cpu), fmt.Sprintf("manager-c%d-cpu-ms/req", clients))
				b.ReportMetric(perRequest(used.runQueue), fmt.Sprintf("manager-c%d-runqueue-ms/req", clients))
				sched := after.histogram(b, "go_sched_latencies_seconds").since(before.histogram(b, "go_sched_latencies_seconds"))
				b.ReportMetric(sched.quantile(0.99)*1000, fmt.Sprintf("manager-c%d-goroutine-wait-p99-ms", clients))
				cycles := after.counter(b, "go_gc_cycles_total_gc_cycles_total") - before.counter(b, "go_gc_cycles_total_gc_cycles_total")
				b.ReportMetric(cycles, fmt.Sprintf("manager-c%d-gc-cycles", clients))
				pauses := after.histogram(b, "go_sched_pauses_total_gc_seconds").since(before.histogram(b, "go_sched_pauses_total_gc_seconds"))
				b.ReportMetric(pauses.quantile(0.99)*1000, fmt.Sprintf("manager-c%d-gc-pause-p99-ms", clients))
				b.ReportMetric(load1(b), fmt.Sprintf("c%d-load1", clients))
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

// scrape reads the manager's metrics as the holder of token, a metrics
// reader.
func scrape(b *testing.B, addr, token string) metricFamilies {
	b.Helper()
	g := NewWithT(b)
	return parseMetrics(g, testenv.Metrics(g, addr, token))
}

// histogram returns the first series of histogram name whose labels hold
// every one of labels, given as name, value pairs, empty when there is
// none yet.
func (f metricFamilies) histogram(b *testing.B, name string, labels ...string) histogram {
	b.Helper()
	family, ok := f[name]
	if !ok {
		return histogram{}
	}
	for _, m := range family.GetMetric() {
		if !hasLabels(m, labels) {
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
	return histogram{}
}

// counter returns the value of counter name, which has one series.
func (f metricFamilies) counter(b *testing.B, name string) float64 {
	b.Helper()
	family, ok := f[name]
	if !ok || len(family.GetMetric()) != 1 {
		b.Fatalf("the manager exports no single series %s", name)
	}
	return family.GetMetric()[0].GetCounter().GetValue()
}

// usage is a process's CPU time and the time its threads waited, runnable,
// for a core, summed over its threads (from /proc/<pid>/task/*/schedstat).
type usage struct{ cpu, runQueue time.Duration }

// managerUsage reads pid's usage so far. Threads that have exited are not
// counted: the Go runtime keeps its threads for the process's life.
func managerUsage(b *testing.B, pid int) usage {
	b.Helper()
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(stats) == 0 {
		b.Fatalf("reading the manager's scheduler statistics: %v", err)
	}
	var u usage
	for _, path := range stats {
		var cpu, wait int64
		data, err := os.ReadFile(path)
		if err == nil {
			_, err = fmt.Sscan(string(data), &cpu, &wait)
		}
		if err != nil {
			b.Fatalf("reading %s: %v", path, err)
		}
		u.cpu += time.Duration(cpu)
		u.runQueue += time.Duration(wait)
	}
	return u
}

// since returns the usage after earlier was read.
func (u usage) since(earlier usage) usage {
	return usage{cpu: u.cpu - earlier.cpu, runQueue: u.runQueue - earlier.runQueue}
}

// load1 is the machine's load average over the last minute.
func load1(b *testing.B) float64 {
	b.Helper()
	data, err := os.ReadFile("/proc/loadavg")
	var load float64
	if err == nil {
		_, err = fmt.Sscan(string(data), &load)
	}
	if err != nil {
		b.Fatalf("reading the load average: %v", err)
	}
	return load
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
