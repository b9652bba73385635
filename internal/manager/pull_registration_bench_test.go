package manager_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// idleWindow is how long the idle agent's requests are counted: 4 minutes,
// or FLEEET_BENCH_IDLE_WINDOW (a Go duration). The manager refreshes an idle
// Remote's heartbeat every 15 minutes, so only a window longer than that
// counts the refresh (idle-manager-writes/min).
func idleWindow(b *testing.B) time.Duration {
	v := os.Getenv("FLEEET_BENCH_IDLE_WINDOW")
	if v == "" {
		return 4 * time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		b.Fatalf("FLEEET_BENCH_IDLE_WINDOW: %v", err)
	}
	return d
}

// writeVerbs are the audited verbs that change something.
var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// BenchmarkPullAgent runs the fleet-manager and fleet-agent binaries as
// processes against real apiservers and reports what a pull agent costs:
// requests per minute an idle agent makes to the management apiserver
// (counted from the apiserver's audit log, by the cluster's identity), the
// agent's RSS idle and while syncing 50 syncs with real Flux, and the latency
// from a Module change to the downstream Assemblage for 100 clusters served
// by the real Upstream code, and from a rotation of a delivered Secret on the
// management cluster to its copy in each of those 100 clusters' namespaces.
// Run it with `make bench`.
func BenchmarkPullAgent(b *testing.B) {
	managerBin := testenv.BuildCommand(b, "fleet-manager", "bench")
	agentBin := testenv.BuildCommand(b, "fleet-agent", "bench")
	b.Run("idle-and-50-syncs", func(b *testing.B) {
		for b.Loop() {
			benchAgentCost(b, managerBin, agentBin)
		}
	})
	b.Run("agents=100", func(b *testing.B) {
		for b.Loop() {
			benchPullLatency(b, managerBin, agentBin, 100)
		}
	})
	b.Run("secret-rotation/agents=100", func(b *testing.B) {
		for b.Loop() {
			benchRotation(b, managerBin, agentBin, 100)
		}
	})
}

func benchAgentCost(b *testing.B, managerBin, agentBin string) {
	ctx := b.Context()
	auditLog := filepath.Join(b.TempDir(), "audit.log")
	mgmt := testenv.StartCluster(b, "management", testenv.WithAuditLog(auditLog), testenv.WithWebhooks())
	down := testenv.StartCluster(b, "downstream")
	testenv.StartFlux(b, down, testenv.SourceController, testenv.KustomizeController)
	testenv.StartManagerProcess(b, managerBin, mgmt)
	git := testenv.NewGitServer(b)
	repo, _ := git.Commit(b, "app", map[string]string{
		"deploy/kustomization.yaml": "resources: [configmap.yaml]\n",
		"deploy/configmap.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-${index}\ndata:\n  index: i-${index}\n",
	}, "v1.0.0")

	e := registered{tenant: tenantIn(b, mgmt), upstream: "team"}
	values := issueTokenIn(b, mgmt, e.tenant, "edge", fleeetv1.RegistrationTokenSpec{
		RemoteLabels: map[string]string{"env": "edge"}, FreeLabelKeys: []string{"region"}})
	if err := down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}); err != nil {
		b.Fatal(err)
	}
	registerUpstream(b, down, e, values, values.Management.URL)
	agent := startAgent(b, agentBin, down) // production heartbeat
	waitFor(b, 2*time.Minute, "the agent to connect", func() bool {
		err := mgmt.Client.Get(ctx, client.ObjectKey{Namespace: e.tenant, Name: fleeetv1.RemoteIdentityName("edge")}, &corev1.Secret{})
		r := &fleeetv1.Remote{}
		return client.IgnoreNotFound(err) == nil && err != nil &&
			mgmt.Client.Get(ctx, client.ObjectKey{Namespace: e.tenant, Name: "edge"}, r) == nil && r.Status.AgentVersion != ""
	})
	time.Sleep(10 * time.Second)
	idleRSS := currentRSS(b, agent)

	for i := range benchModules {
		m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"env": "edge"}})
		m.Name, m.Namespace = fmt.Sprintf("module-%02d", i), e.tenant
		m.Spec.Sync.Source.Git.URL = repo
		m.Spec.Sync.Package.Kustomize.TargetNamespace = e.upstream
		m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"index": fmt.Sprint(i)}
		if err := mgmt.Client.Create(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	waitFor(b, 10*time.Minute, "every Module Ready on the cluster", func() bool {
		modules := &fleeetv1.ModuleList{}
		if err := mgmt.Client.List(ctx, modules, client.InNamespace(e.tenant)); err != nil {
			return false
		}
		for _, m := range modules.Items {
			if m.Status.Summary.Ready != 1 {
				return false
			}
		}
		return len(modules.Items) == benchModules
	}, func() string { return explainAssemblage(down, e.upstream) })
	synced := time.Since(start)
	peakRSS, _ := processUsage(b, agent)

	time.Sleep(30 * time.Second) // let the last status reports land
	window := idleWindow(b)
	from := time.Now()
	time.Sleep(window)
	to := time.Now()
	steadyRSS := currentRSS(b, agent)
	// The manager runs as the admin user, which nothing else uses while
	// the fleet idles.
	for _, who := range []struct{ user, metric string }{
		{"system:serviceaccount:" + e.tenant + ":" + fleeetv1.RemoteIdentityName("edge"), "idle-requests/min"},
		{testenv.AdminUser, "idle-manager-requests/min"},
	} {
		requests := auditedRequests(b, auditLog, who.user, from, to)
		b.Logf("requests by %s in %s: %v", who.user, window, requests)
		total, writes := 0, 0
		for request, n := range requests {
			total += n
			if verb, _, _ := strings.Cut(request, " "); writeVerbs[verb] {
				writes += n
			}
		}
		b.ReportMetric(float64(total)/to.Sub(from).Minutes(), who.metric)
		if who.user == testenv.AdminUser {
			b.ReportMetric(float64(writes)/to.Sub(from).Minutes(), "idle-manager-writes/min")
		}
	}
	b.ReportMetric(idleRSS, "idle-RSS-MiB")
	b.ReportMetric(peakRSS, "peak-RSS-50-syncs-MiB")
	b.ReportMetric(steadyRSS, "steady-RSS-50-syncs-MiB")
	b.ReportMetric(synced.Seconds(), "50-syncs-ready-s")
}

// auditedRequests counts, by verb and resource, the requests user made
// between from and to, from the apiserver's audit log.
func auditedRequests(b *testing.B, path, user string, from, to time.Time) map[string]int {
	counts := map[string]int{}
	for _, ev := range testenv.AuditLog(b, path, user) {
		if !ev.Received.Time.Before(from) && !ev.Received.Time.After(to) {
			counts[ev.Verb+" "+ev.Resource]++
		}
	}
	return counts
}

// pullFleet starts a management and a downstream cluster, the manager and
// one agent process holding agents Upstreams, each a cluster edge-NNN of one
// tenant, mirroring its plan into the agent's namespace or, with
// ownNamespaces, into a namespace of its own named after it. It returns the
// clusters and the tenant.
func pullFleet(b *testing.B, managerBin, agentBin string, agents int, ownNamespaces bool) (mgmt, down *testenv.Cluster, ns string) {
	ctx := b.Context()
	mgmt = testenv.StartCluster(b, "management", testenv.WithWebhooks())
	down = testenv.StartCluster(b, "downstream")
	testenv.StartManagerProcess(b, managerBin, mgmt)
	ns = tenantIn(b, mgmt)
	values := issueTokenIn(b, mgmt, ns, "fleet", fleeetv1.RegistrationTokenSpec{
		MaxRegistrations: int32(agents), RemoteLabels: map[string]string{"fleet": "all"}, FreeLabelKeys: []string{"region"}})
	if err := down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}); err != nil {
		b.Fatal(err)
	}
	for i := range agents {
		name := fmt.Sprintf("edge-%03d", i)
		target := agentNamespace
		if ownNamespaces {
			target = name
			if err := down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
				b.Fatal(err)
			}
		}
		createUpstream(b, down, name, name, target, values, values.Management.URL)
	}
	startAgent(b, agentBin, down)
	return mgmt, down, ns
}

// benchPullLatency also reports, between the Module update and the last
// Assemblage updated, how many of the machine's cores were busy and the
// CPU each kind of process used (cpuByCommand), each apiserver's apart:
// with every core busy, the latency is bounded by CPU, not by queues, and
// the split says whose.
func benchPullLatency(b *testing.B, managerBin, agentBin string, agents int) {
	ctx := b.Context()
	mgmt, down, ns := pullFleet(b, managerBin, agentBin, agents, false)
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "all"}})
	m.Namespace = ns
	if err := mgmt.Client.Create(ctx, m); err != nil {
		b.Fatal(err)
	}
	tagged := func(tag string) func(*fleeetv1.Assemblage) bool {
		return func(a *fleeetv1.Assemblage) bool {
			return len(a.Spec.Syncs) == 1 && a.Spec.Syncs[0].Source.Git.Tag == tag
		}
	}
	watchAssemblages(b, down, agents, tagged("v1.0.0"))

	// A patch, not an update: the manager keeps writing the Module's status.
	newTag := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"sync":{"source":{"git":{"tag":"v2.0.0"}}}}}`))
	cpuBefore, busyBefore := cpuByCommand(b), machineBusy(b)
	mgmtBefore, downBefore := apiserverCPU(b, mgmt), apiserverCPU(b, down)
	trafficBefore := apiserverTraffic(b, mgmt)
	start := time.Now()
	if err := mgmt.Client.Patch(ctx, m, newTag); err != nil {
		b.Fatal(err)
	}
	// The management side of the latency: when each ProxyAssemblage was
	// written; the agent's side is from then until its cluster's Assemblage
	// was.
	// Plans name CompiledSyncs: the tag is read from the content.
	contents := &fleettest.Contents{Reader: mgmt.Client}
	planned := make(chan map[string]time.Time, 1)
	go func() {
		planned <- waitPlans(b, mgmt, ns, agents, func(pa *fleeetv1.ProxyAssemblage) bool {
			syncs := contents.Syncs(pa)
			return len(syncs) == 1 && syncs[0].Source.Git != nil && syncs[0].Source.Git.Tag == "v2.0.0"
		})
	}()
	done := watchAssemblages(b, down, agents, tagged("v2.0.0"))
	window, busy := time.Since(start), machineBusy(b)-busyBefore
	reportCPUSince(b, cpuBefore, "")
	b.ReportMetric((apiserverCPU(b, mgmt)-mgmtBefore)*1000, "management-apiserver-cpu-ms")
	b.ReportMetric((apiserverCPU(b, down)-downBefore)*1000, "downstream-apiserver-cpu-ms")
	written := <-planned
	var plans, agent []time.Duration
	for cluster, at := range done {
		wrote, ok := written[cluster]
		if !ok {
			b.Fatalf("the Assemblage of %s was updated, but no plan of that name was seen written", cluster)
		}
		plans, agent = append(plans, wrote.Sub(start)), append(agent, at.Sub(wrote))
	}
	slices.Sort(plans)
	slices.Sort(agent)
	b.ReportMetric(float64(plans[len(plans)-1].Milliseconds()), "all-plans-written-ms")
	b.ReportMetric(float64(percentile(plans, 99).Milliseconds()), "plan-written-p99-ms")
	b.ReportMetric(float64(percentile(agent, 50).Milliseconds()), "agent-p50-ms")
	b.ReportMetric(float64(percentile(agent, 99).Milliseconds()), "agent-p99-ms")
	b.ReportMetric(busy/window.Seconds(), "busy-cores")
	reportLatencies(b, start, done)

	// What the change cost the management apiserver in writes, the
	// manager's plans and the agents' reports of them, once every cluster
	// has reported the new plan.
	waitPlans(b, mgmt, ns, agents, func(pa *fleeetv1.ProxyAssemblage) bool { return pa.Status.ObservedGeneration == pa.Generation })
	traffic := apiserverTraffic(b, mgmt).since(trafficBefore)
	b.ReportMetric(traffic.writes, "to-reported-writes")
	b.ReportMetric(traffic.written/1e3, "to-reported-written-KB")
	b.ReportMetric((apiserverCPU(b, mgmt)-mgmtBefore)*1000, "to-reported-management-apiserver-cpu-ms")
}

// reportLatencies reports the p50, p99 and largest of the times from start
// to each of done.
func reportLatencies(b *testing.B, start time.Time, done map[string]time.Time) {
	latencies := make([]time.Duration, 0, len(done))
	for _, at := range done {
		latencies = append(latencies, at.Sub(start))
	}
	slices.Sort(latencies)
	b.ReportMetric(float64(percentile(latencies, 50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(percentile(latencies, 99).Milliseconds()), "p99-ms")
	b.ReportMetric(float64(latencies[len(latencies)-1].Milliseconds()), "max-ms")
}

// percentile returns the p-th percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	return sorted[max(0, (p*len(sorted)+99)/100-1)]
}

// watchAssemblages watches the downstream Assemblages until n satisfy done
// and returns when each first did.
func watchAssemblages(b *testing.B, c *testenv.Cluster, n int, done func(*fleeetv1.Assemblage) bool) map[string]time.Time {
	at := map[string]time.Time{}
	testenv.WatchUntil(b, c, &fleeetv1.AssemblageList{}, agentNamespace, 10*time.Minute, fmt.Sprintf("%d Assemblages", n), func(ev watch.Event) bool {
		a, ok := ev.Object.(*fleeetv1.Assemblage)
		if !ok || ev.Type == watch.Deleted || !done(a) {
			return false
		}
		if _, seen := at[a.Name]; !seen {
			at[a.Name] = time.Now()
		}
		return len(at) == n
	})
	return at
}

// waitFor polls cond every half second until it holds; explain, if not
// nil, says what was seen when it times out.
func waitFor(b *testing.B, limit time.Duration, what string, cond func() bool, explain ...func() string) {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			var seen []string
			for _, e := range explain {
				seen = append(seen, e())
			}
			b.Fatalf("timed out after %s waiting for %s %s", limit, what, strings.Join(seen, "\n"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// currentRSS reads a running process's resident memory (MiB) from /proc.
func currentRSS(b *testing.B, p *testenv.Process) float64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		b.Fatal(err)
	}
	var kb float64
	for _, line := range strings.Split(string(status), "\n") {
		if _, err := fmt.Sscanf(line, "VmRSS: %f kB", &kb); err == nil {
			return kb / 1024
		}
	}
	b.Fatal("no VmRSS in /proc status")
	return 0
}

// explainAssemblage summarizes the Assemblage name/name and its first syncs.
func explainAssemblage(down *testenv.Cluster, name string) string {
	a := &fleeetv1.Assemblage{}
	if err := down.Client.Get(context.Background(), client.ObjectKey{Namespace: name, Name: name}, a); err != nil {
		return err.Error()
	}
	out := fmt.Sprintf("syncs=%d summary=%+v", len(a.Spec.Syncs), a.Status.Summary)
	for i, s := range a.Status.Syncs {
		if i < 3 {
			out += fmt.Sprintf("\n  %s %s %s", s.Name, s.State, s.Message)
		}
	}
	return out
}
