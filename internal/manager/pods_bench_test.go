package manager_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// versionAnnotation marks podinfo's Pods with the version they run.
const versionAnnotation = "bench.fleeet.dev/version"

// BenchmarkVersionChangeToPodsReady measures, on three clusters with real
// nodes, the time from a Module's version change to every cluster running
// the new version's Pods Ready, against the same change made with plain
// Flux on each cluster at once (a GitRepository's tag, in the same run, on
// the same nodes), and the memory of a node's kubelet and containerd.
// Run it with `make bench`.
func BenchmarkVersionChangeToPodsReady(b *testing.B) {
	benchOnNodes(b, func(managerBin, agentBin string) { benchPodsReady(b, managerBin, agentBin, 3) })
}

// benchOnNodes builds the fleet-manager and fleet-agent binaries and runs
// bench with them once per iteration, or skips where nodes cannot run.
func benchOnNodes(b *testing.B, bench func(managerBin, agentBin string)) {
	if why := testenv.NodesUnsupported(); why != "" {
		b.Skip(why)
	}
	managerBin := testenv.BuildCommand(b, "fleet-manager", "bench")
	agentBin := testenv.BuildCommand(b, "fleet-agent", "bench")
	for b.Loop() {
		bench(managerBin, agentBin)
	}
}

func benchPodsReady(b *testing.B, managerBin, agentBin string, clusters int) {
	ctx := b.Context()
	podinfo := testenv.GetPodinfo(b)
	git := testenv.NewGitServer(b)
	repo, _ := git.Commit(b, "podinfo", podinfoAt(b, podinfo, "v1"), "v1")
	git.Commit(b, "podinfo", podinfoAt(b, podinfo, "v2"), "v2")
	f := startPodsFleet(b, managerBin, agentBin, podinfo, clusters)
	mgmt, e, downs, nodes := f.mgmt, f.registered, f.downs, f.nodes

	// The same podinfo, through fleeet into namespace team and through
	// plain Flux into namespace flux, on every cluster.
	m := fleettest.NewModule("v1", &metav1.LabelSelector{MatchLabels: map[string]string{"env": "edge"}})
	m.Name, m.Namespace = "podinfo", e.tenant
	m.Spec.Sync.Source.Git.URL = repo
	m.Spec.Sync.Package.Kustomize.Path = "./deploy"
	m.Spec.Sync.Package.Kustomize.TargetNamespace = e.upstream
	if err := mgmt.Client.Create(ctx, m); err != nil {
		b.Fatal(err)
	}
	for _, down := range downs {
		createPlainFlux(b, down, repo, &sourcev1.GitRepositoryRef{Tag: "v1"}, 10*time.Minute)
	}
	waitFor(b, 10*time.Minute, "podinfo v1 Ready through fleeet and plain Flux on every cluster", func() bool {
		return len(rolledOut(b, downs, e.upstream, "v1")) == clusters && len(rolledOut(b, downs, "flux", "v1")) == clusters
	})

	fleeet := measureRollout(b, downs, e.upstream, func() {
		if err := testenv.Change(ctx, mgmt.Client, m, func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v2" }); err != nil {
			b.Fatal(err)
		}
	})
	flux := measureRollout(b, downs, "flux", func() {
		for _, down := range downs {
			repo := &sourcev1.GitRepository{}
			if err := down.Client.Get(ctx, client.ObjectKey{Namespace: "flux", Name: "podinfo"}, repo); err != nil {
				b.Fatal(err)
			}
			repo.Spec.Reference.Tag = "v2"
			if err := down.Client.Update(ctx, repo); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(fleeet.Seconds(), "fleeet-s")
	b.ReportMetric(flux.Seconds(), "plain-flux-s")
	b.ReportMetric(fleeet.Seconds()/flux.Seconds(), "fleeet/flux")
	for i, node := range nodes {
		rss := node.MemoryRSS()
		b.Logf("node %d RSS by component (MiB): kubelet %.1f, containerd %.1f, shims %.1f, kube-proxy %.1f", i+1,
			mib(rss["kubelet"]), mib(rss["containerd"]), mib(rss["shims"]), mib(rss["kube-proxy"]))
		if i == 0 {
			b.ReportMetric(mib(rss["kubelet"]+rss["containerd"]), "kubelet+containerd-MiB")
			b.ReportMetric(mib(rss["kubelet"]+rss["containerd"]+rss["shims"]), "with-shims-MiB")
		}
	}
}

// podinfoAt is podinfo's kustomize files with its Pods marked as running
// version.
func podinfoAt(b *testing.B, podinfo *testenv.Podinfo, version string) map[string]string {
	return podinfo.Kustomize(b, "deploy", func(name string, content []byte) []byte {
		if name != "kustomization.yaml" {
			return content
		}
		return append(content, fmt.Sprintf("commonAnnotations:\n  %s: %s\n", versionAnnotation, version)...)
	})
}

// podsFleet is a management cluster running the fleet-manager binary and
// downstream clusters with a real node each, podinfo's image imported, Flux
// and an agent registered in its tenant.
type podsFleet struct {
	mgmt *testenv.Cluster
	registered
	downs []*testenv.Cluster
	nodes []*testenv.Node
}

func startPodsFleet(b *testing.B, managerBin, agentBin string, podinfo *testenv.Podinfo, clusters int) podsFleet {
	ctx := b.Context()
	f := podsFleet{mgmt: testenv.StartCluster(b, "management", testenv.WithWebhooks())}
	testenv.StartManagerProcess(b, managerBin, f.mgmt)
	f.registered = registered{tenant: tenantIn(b, f.mgmt), upstream: "team"}
	values := issueTokenIn(b, f.mgmt, f.tenant, "edge", fleeetv1.RegistrationTokenSpec{
		MaxRegistrations: int32(clusters), RemoteLabels: map[string]string{"env": "edge"}, FreeLabelKeys: []string{"region"}})
	for i := range clusters {
		name := fmt.Sprintf("edge-%d", i+1)
		down := testenv.StartCluster(b, name, testenv.WithNodes())
		node := down.StartNode(b, name)
		node.ImportImage(b, podinfo.Archive)
		testenv.StartFlux(b, down, testenv.SourceController, testenv.KustomizeController)
		for _, ns := range []string{agentNamespace, f.upstream, "flux"} {
			if err := down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				b.Fatal(err)
			}
		}
		createUpstream(b, down, f.upstream, name, f.upstream, values, values.Management.URL)
		startAgent(b, agentBin, down)
		f.downs, f.nodes = append(f.downs, down), append(f.nodes, node)
	}
	return f
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// createPlainFlux applies podinfo at ref with a GitRepository looked at
// every interval and a Kustomization, Flux's own, as a user of Flux alone
// would.
func createPlainFlux(b *testing.B, down *testenv.Cluster, url string, ref *sourcev1.GitRepositoryRef, interval time.Duration) {
	ctx := b.Context()
	for _, obj := range []client.Object{
		&sourcev1.GitRepository{
			ObjectMeta: metav1.ObjectMeta{Namespace: "flux", Name: "podinfo"},
			Spec:       sourcev1.GitRepositorySpec{URL: url, Interval: metav1.Duration{Duration: interval}, Reference: ref},
		},
		&kustomizev1.Kustomization{
			ObjectMeta: metav1.ObjectMeta{Namespace: "flux", Name: "podinfo"},
			Spec: kustomizev1.KustomizationSpec{
				SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: "podinfo"},
				// It applies each new artifact of its source when it appears.
				Path: "./deploy", Prune: true, Interval: metav1.Duration{Duration: 10 * time.Minute}, TargetNamespace: "flux",
			},
		},
	} {
		if err := down.Client.Create(ctx, obj); err != nil {
			b.Fatal(err)
		}
	}
}

// measureRollout makes a change and returns how long until podinfo in
// namespace ns runs v2's Pods, all Ready, on every cluster.
func measureRollout(b *testing.B, downs []*testenv.Cluster, ns string, change func()) time.Duration {
	start := time.Now()
	change()
	return untilRolledOut(b, downs, "v2", start, ns)[ns]
}

// untilRolledOut returns, for each of namespaces, how long after start
// podinfo there ran version's Pods, all Ready, on every cluster.
func untilRolledOut(b *testing.B, downs []*testenv.Cluster, version string, start time.Time, namespaces ...string) map[string]time.Duration {
	took := map[string]time.Duration{}
	done := map[string]map[string]time.Duration{}
	for len(took) < len(namespaces) {
		if time.Since(start) > 10*time.Minute {
			b.Fatalf("%s rolled out in %d of namespaces %v on every cluster in 10m: %v", version, len(took), namespaces, done)
		}
		for _, ns := range namespaces {
			if _, ok := took[ns]; ok {
				continue
			}
			if done[ns] == nil {
				done[ns] = map[string]time.Duration{}
			}
			for _, name := range rolledOut(b, downs, ns, version) {
				if _, ok := done[ns][name]; !ok {
					done[ns][name] = time.Since(start)
				}
			}
			if len(done[ns]) == len(downs) {
				took[ns] = slices.Max(slices.Collect(maps.Values(done[ns])))
				b.Logf("namespace %s: %s Ready per cluster after %v", ns, version, done[ns])
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return took
}

// rolledOut returns the clusters whose podinfo Deployment in ns runs
// version's Pods only, every one of them Ready.
func rolledOut(b *testing.B, downs []*testenv.Cluster, ns, version string) []string {
	var out []string
	for _, down := range downs {
		d := &appsv1.Deployment{}
		if err := down.Client.Get(b.Context(), client.ObjectKey{Namespace: ns, Name: "podinfo"}, d); err != nil {
			continue
		}
		want := *d.Spec.Replicas
		if d.Spec.Template.Annotations[versionAnnotation] == version && d.Status.ObservedGeneration == d.Generation &&
			d.Status.UpdatedReplicas == want && d.Status.ReadyReplicas == want && d.Status.Replicas == want {
			out = append(out, down.Name)
		}
	}
	return out
}
