package manager_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

const benchModules = 50

// changeCPUProfile, when set, is a file BenchmarkFleetScale writes the
// first replica's CPU profile of each version change into (go tool pprof
// reads it): -args -change.cpuprofile=/tmp/change.pprof.
var changeCPUProfile = flag.String("change.cpuprofile", "", "BenchmarkFleetScale: write the first replica's CPU profile of the version change to this file")

// changeAPIServerProfile is where BenchmarkFleetScale writes the
// apiserver's CPU profile of each version change:
// -args -change.apiserver-cpuprofile=/tmp/apiserver.pprof.
var changeAPIServerProfile = flag.String("change.apiserver-cpuprofile", "", "BenchmarkFleetScale: write the apiserver's CPU profile of the version change to this file")

// coldCPUProfile is where BenchmarkFleetScale writes the first replica's
// CPU profile of its first 20 s, the cold start:
// -args -cold.cpuprofile=/tmp/cold.pprof.
var coldCPUProfile = flag.String("cold.cpuprofile", "", "BenchmarkFleetScale: write the first replica's CPU profile of the cold start to this file")

// The client rate limits the benchmark runs the manager with: a fleet of
// thousands needs more than the defaults (100/300), or every ProxyAssemblage
// write waits for the limiter.
const (
	benchQPS   = "1000"
	benchBurst = "2000"
)

// BenchmarkFleetScale runs the fleet-manager binary, as processes (one
// replica, or three sharing the Remotes), against a fresh apiserver holding
// N Remotes and 50 Modules that select all of them, and reports:
// management objects against the M×N a per-pair design needs, the
// cold-start time until every ProxyAssemblage holds all 50 syncs, with the
// apiserver's write requests and webhook calls and each kind of process's
// CPU meanwhile, the time from one Module's version change (AllAtOnce)
// until every ProxyAssemblage holds the new version, the apiserver's write
// requests and webhook calls during that change, their rate, the bytes
// written to it and sent out in watch events, how many of the machine's
// cores were busy during it (all processes) and the CPU of each kind of
// process meanwhile, etcd's
// database size, each replica's peak RSS and CPU seconds, and how long
// each replica takes to exit on SIGTERM when they stop one after another.
// Run it with `make bench`.
func BenchmarkFleetScale(b *testing.B) {
	bin := testenv.BuildCommand(b, "fleet-manager", "bench")
	for _, run := range []struct{ remotes, replicas int }{{1000, 1}, {1000, 3}, {5000, 1}, {5000, 3}, {10000, 1}, {10000, 3}} {
		b.Run(fmt.Sprintf("remotes=%d/replicas=%d", run.remotes, run.replicas), func(b *testing.B) {
			for b.Loop() {
				benchFleet(b, bin, run.remotes, run.replicas)
			}
		})
	}
}

func benchFleet(b *testing.B, bin string, remotes, replicas int) {
	c := testenv.StartCluster(b, "management", testenv.WithWebhooks())
	ctx := b.Context()
	const system = "fleeet-system"
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: system}}); err != nil {
		b.Fatal(err)
	}
	ns := tenantIn(b, c)
	// The fleet exists before the manager starts, so the webhook it serves
	// is registered only once the objects are in place.
	hook := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "fleet-manager"}, hook); err != nil {
		b.Fatal(err)
	}
	if err := c.Client.Delete(ctx, hook); err != nil {
		b.Fatal(err)
	}
	parallel(b, remotes, func(i int) error {
		r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("edge-%05d", i), Namespace: ns, Labels: map[string]string{"fleet": "all"}}}
		if err := c.Client.Create(ctx, r); err != nil {
			return err
		}
		// As an agent of this version says, so that plans name CompiledSyncs
		// and CompiledPlans.
		return c.Client.Status().Patch(ctx, r, client.RawPatch(types.MergePatchType, []byte(`{"status":{"readsCompiledSyncs":true,"readsCompiledPlans":true}}`)))
	})
	parallel(b, benchModules, func(i int) error {
		m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
		m.Name, m.Namespace = fmt.Sprintf("module-%02d", i), ns
		return c.Client.Create(ctx, m)
	})

	hook.ResourceVersion, hook.UID = "", ""
	if err := c.Client.Create(ctx, hook); err != nil {
		b.Fatal(err)
	}
	start, coldCPU := time.Now(), cpuByCommand(b)
	coldTraffic := apiserverTraffic(b, c)
	var ps []shardReplica
	pprof := testenv.FreeAddr(b)
	var profiled []func()
	for i := range replicas {
		args := []string{"--kube-api-qps=" + benchQPS, "--kube-api-burst=" + benchBurst}
		if i == 0 && (*changeCPUProfile != "" || *coldCPUProfile != "") {
			args = append(args, "--pprof-bind-address="+pprof)
		}
		// The last replica serves admission where the apiserver sends it.
		ps = append(ps, startShardReplica(b, bin, c, system, fmt.Sprintf("r%d", i+1), i == replicas-1, args...))
		if i == 0 && *coldCPUProfile != "" {
			profiled = append(profiled, profileCPU(b, http.DefaultClient, "http://"+pprof, *coldCPUProfile, 20))
		}
	}
	// What plans name, each read once.
	store := &plancontent.Cache{From: plancontent.From(c.Client, ns)}
	entries := func(pa *fleeetv1.ProxyAssemblage) []fleeetv1.NamedSync {
		entries, err := plancontent.Entries(ctx, pa, store)
		if err != nil {
			b.Fatal(err)
		}
		return entries
	}
	waitPlans(b, c, ns, remotes, func(pa *fleeetv1.ProxyAssemblage) bool {
		return len(entries(pa)) == benchModules
	})
	cold := time.Since(start)
	reportCPUSince(b, coldCPU, "cold-")
	coldTraffic = apiserverTraffic(b, c).since(coldTraffic)
	b.ReportMetric(coldTraffic.writes, "cold-writes")
	b.ReportMetric(coldTraffic.judged, "cold-webhook-calls")

	// A patch, not an update: the manager keeps writing the Module's status.
	m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "module-00"}}
	newTag := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"sync":{"source":{"git":{"tag":"v2.0.0"}}}}}`))
	trafficBefore, busyBefore, cpuBefore := apiserverTraffic(b, c), machineBusy(b), cpuByCommand(b)
	if *changeCPUProfile != "" {
		profiled = append(profiled, profileCPU(b, http.DefaultClient, "http://"+pprof, *changeCPUProfile, 10))
	}
	if *changeAPIServerProfile != "" {
		hc, err := rest.HTTPClientFor(c.Config)
		if err != nil {
			b.Fatal(err)
		}
		profiled = append(profiled, profileCPU(b, hc, strings.TrimSuffix(c.Config.Host, "/"), *changeAPIServerProfile, 10))
	}
	start = time.Now()
	if err := c.Client.Patch(ctx, m, newTag); err != nil {
		b.Fatal(err)
	}
	waitPlans(b, c, ns, remotes, func(pa *fleeetv1.ProxyAssemblage) bool {
		syncs, err := plancontent.Resolve(ctx, entries(pa), store)
		if err != nil {
			b.Fatal(err)
		}
		return len(syncs) > 0 && syncs[0].Source.Git.Tag == "v2.0.0"
	})
	rollout := time.Since(start)
	busy := machineBusy(b) - busyBefore
	reportCPUSince(b, cpuBefore, "version-change-")
	traffic := apiserverTraffic(b, c).since(trafficBefore)

	for _, r := range ps {
		rss, cpu := processUsage(b, r.process)
		b.ReportMetric(rss, r.id+"-peak-RSS-MiB")
		b.ReportMetric(cpu, r.id+"-cpu-s")
	}
	objects := 0
	for _, list := range []client.ObjectList{&fleeetv1.ModuleList{}, &fleeetv1.RemoteList{}, &fleeetv1.ProxyAssemblageList{}, &fleeetv1.CompiledSyncList{}, &fleeetv1.CompiledPlanList{}} {
		if err := c.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		objects += apimeta.LenList(list)
	}
	plans := &fleeetv1.ProxyAssemblageList{}
	if err := c.Client.List(ctx, plans, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	planBytes := 0
	for i := range plans.Items {
		raw, err := json.Marshal(&plans.Items[i])
		if err != nil {
			b.Fatal(err)
		}
		planBytes += len(raw)
	}
	b.ReportMetric(float64(planBytes)/float64(len(plans.Items)), "plan-bytes")
	dbSize, _ := parseMetrics(NewWithT(b), fetchMetrics(b, http.DefaultClient, c.EtcdMetricsURL())).sum("etcd_mvcc_db_total_size_in_bytes")
	b.ReportMetric(float64(objects), "objects")
	b.ReportMetric(float64(benchModules*remotes), "per-pair-objects")
	b.ReportMetric(cold.Seconds(), "cold-s")
	b.ReportMetric(rollout.Seconds(), "version-change-s")
	b.ReportMetric(traffic.writes, "version-change-writes")
	b.ReportMetric(traffic.judged, "version-change-webhook-calls")
	b.ReportMetric(traffic.writes/rollout.Seconds(), "version-change-writes/s")
	b.ReportMetric(traffic.written/1e6, "version-change-written-MB")
	b.ReportMetric(traffic.watched/1e6, "version-change-watch-MB")
	b.ReportMetric(busy/rollout.Seconds(), "version-change-busy-cores")
	b.ReportMetric(dbSize/(1<<20), "etcd-db-MiB")

	for _, wait := range profiled {
		wait()
	}
	// Each replica stops in turn, as in a rolling update: the ones still
	// running take over its Remotes, so the next to stop has a full queue.
	for _, r := range ps {
		start := time.Now()
		if err := r.process.Stop(time.Minute); err != nil {
			b.Errorf("stopping replica %s: %v", r.id, err)
		}
		b.ReportMetric(time.Since(start).Seconds(), r.id+"-stop-s")
	}
}

// profileCPU starts a CPU profile of seconds of the process serving pprof
// at base, once it serves, and returns a function that waits for it and
// writes it to file. A version change at 1,000 Remotes takes about 10 s.
func profileCPU(b *testing.B, hc *http.Client, base, file string, seconds int) (wait func()) {
	done := make(chan error, 1)
	go func() {
		url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, seconds)
		resp, err := hc.Get(url)
		// A process just started may not listen yet.
		for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			resp, err = hc.Get(url)
		}
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		switch {
		case err == nil && resp.StatusCode != http.StatusOK:
			err = fmt.Errorf("%s: %s", resp.Status, raw)
		case err == nil:
			err = os.WriteFile(file, raw, 0o644)
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			b.Errorf("profiling %s: %v", file, err)
		}
	}
}

// traffic is what an apiserver has counted since it started: write
// requests (create, update, patch, apply), the bytes of their request
// bodies, the bytes of the watch events it sent, and the requests it sent
// to admission webhooks.
type traffic struct{ writes, written, watched, judged float64 }

// since is what was counted between before and t.
func (t traffic) since(before traffic) traffic {
	return traffic{t.writes - before.writes, t.written - before.written, t.watched - before.watched, t.judged - before.judged}
}

// apiserverTraffic reads c's apiserver's own counts of what it was sent
// and sent out (apiserver_request_total, apiserver_request_body_size_bytes,
// apiserver_watch_events_sizes, apiserver_admission_webhook_admission_duration_seconds).
func apiserverTraffic(b *testing.B, c *testenv.Cluster) traffic {
	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	metrics := parseMetrics(NewWithT(b), fetchMetrics(b, hc, strings.TrimSuffix(c.Config.Host, "/")+"/metrics"))
	var t traffic
	for _, verb := range []string{"POST", "PUT", "PATCH", "APPLY"} {
		n, _ := metrics.sum("apiserver_request_total", "verb", verb)
		t.writes += n
	}
	t.written, _ = metrics.sum("apiserver_request_body_size_bytes")
	t.watched, _ = metrics.sum("apiserver_watch_events_sizes")
	for _, m := range metrics["apiserver_admission_webhook_admission_duration_seconds"].GetMetric() {
		t.judged += float64(m.GetHistogram().GetSampleCount())
	}
	return t
}

// fetchMetrics reads the Prometheus metrics text at url.
func fetchMetrics(b *testing.B, hc *http.Client, url string) string {
	resp, err := hc.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("reading %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body)
}

// parallel runs fn for 0..n-1 on eight workers, failing on the first error.
func parallel(b *testing.B, n int, fn func(int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// waitPlans waits until every one of n ProxyAssemblages satisfies done and
// returns when each first did. It watches instead of listing, so that
// measuring does not load the apiserver.
func waitPlans(b *testing.B, c *testenv.Cluster, ns string, n int, done func(*fleeetv1.ProxyAssemblage) bool) map[string]time.Time {
	finished, first := map[string]bool{}, map[string]time.Time{}
	count := 0
	testenv.WatchUntil(b, c, &fleeetv1.ProxyAssemblageList{}, ns, 15*time.Minute, fmt.Sprintf("all %d ProxyAssemblages", n), func(ev watch.Event) bool {
		pa, ok := ev.Object.(*fleeetv1.ProxyAssemblage)
		if !ok {
			return false
		}
		now := ev.Type != watch.Deleted && done(pa)
		switch was := finished[pa.Name]; {
		case now && !was:
			count++
			if _, seen := first[pa.Name]; !seen {
				first[pa.Name] = time.Now()
			}
		case was && !now:
			count--
		}
		finished[pa.Name] = now
		return count == n
	})
	return first
}

// processUsage reads a running process's peak resident memory (MiB) and the
// CPU seconds it has used, from /proc.
func processUsage(b *testing.B, p *testenv.Process) (rssMiB, cpuSeconds float64) {
	pid := p.Pid()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			rssMiB = kb / 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	_, cpuSeconds, ok := parseStat(stat)
	if !ok {
		b.Fatalf("cannot read /proc/%d/stat: %q", pid, stat)
	}
	return rssMiB, cpuSeconds
}

// parseStat reads a process's command name and the CPU seconds it has used
// from its /proc/<pid>/stat.
func parseStat(stat []byte) (command string, cpuSeconds float64, ok bool) {
	// The command name is in parentheses and may hold spaces. Of the fields
	// after it, utime and stime are the 12th and 13th, in clock ticks (100
	// per second on Linux).
	open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || closing < open {
		return "", 0, false
	}
	f := strings.Fields(string(stat[closing+1:]))
	if len(f) < 13 {
		return "", 0, false
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	return string(stat[open+1 : closing]), (utime + stime) / 100, err1 == nil && err2 == nil
}

// cpuByCommand is how many CPU-seconds the running processes have used,
// summed by command name (the kernel's, cut to 15 bytes: kube-apiserver,
// etcd, fleet-manager, fleet-agent, manager.test for this benchmark
// itself), from /proc.
func cpuByCommand(b *testing.B) map[string]float64 {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		b.Fatal(err)
	}
	cpu := map[string]float64{}
	for _, path := range stats {
		stat, err := os.ReadFile(path)
		if err != nil {
			continue // exited since the glob
		}
		if command, seconds, ok := parseStat(stat); ok {
			cpu[command] += seconds
		}
	}
	return cpu
}

// apiserverCPU is how many CPU-seconds c's kube-apiserver has used: the
// process serving c's port, found through /proc.
func apiserverCPU(b *testing.B, c *testenv.Cluster) float64 {
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		b.Fatal(err)
	}
	flag := []byte("--secure-port=" + u.Port() + "\x00")
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		b.Fatal(err)
	}
	for _, path := range cmdlines {
		cmdline, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(cmdline, flag) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(path), "stat"))
		if err != nil {
			continue
		}
		if command, seconds, ok := parseStat(stat); ok && command == "kube-apiserver" {
			return seconds
		}
	}
	b.Fatalf("no kube-apiserver process serves %s", c.Config.Host)
	return 0
}

// benchCommands are the processes a benchmark's CPU is reported for:
// apiservers and etcds (of every cluster), fleeet's, and the benchmark.
var benchCommands = []string{"kube-apiserver", "etcd", "fleet-manager", "fleet-agent", "manager.test"}

// reportCPUSince reports the CPU milliseconds each of benchCommands used
// since cpuByCommand returned before, as <prefix><command>-cpu-ms.
func reportCPUSince(b *testing.B, before map[string]float64, prefix string) {
	after := cpuByCommand(b)
	for _, command := range benchCommands {
		if used := after[command] - before[command]; used > 0 {
			b.ReportMetric(used*1000, prefix+command+"-cpu-ms")
		}
	}
}

// machineBusy is how many CPU-seconds the machine's cores have spent
// busy (not idle, not waiting for I/O) since it booted, by every process,
// from /proc/stat.
func machineBusy(b *testing.B) float64 {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The first line sums every core: "cpu  user nice system idle iowait
	// irq softirq steal guest guest_nice", in clock ticks (100 per second).
	line, _, _ := strings.Cut(string(stat), "\n")
	var busy float64
	for i, field := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is counted in user already
			continue
		}
		ticks, err := strconv.ParseFloat(field, 64)
		if err != nil {
			b.Fatalf("reading /proc/stat: %v", err)
		}
		busy += ticks
	}
	return busy / 100
}
