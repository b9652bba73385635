package assemblage_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	chainLength = 10
	// shardKey is the label Flux's sharding assigns objects to a set of
	// controllers by.
	shardKey = "sharding.fluxcd.io/key"
)

// fluxShard is one set of kustomize- and helm-controllers with its own
// --requeue-dependency, reconciling the objects labelled shardKey=key
// (unlabelled objects when key is empty).
type fluxShard struct {
	requeue time.Duration
	key     string
}

// fluxShards are the requeue intervals the Flux variants run under: Flux's
// default, whose shard also reconciles everything fleeet's agent creates,
// and a sixth of it.
var fluxShards = []fluxShard{{30 * time.Second, ""}, {5 * time.Second, "requeue-5s"}}

// selector is the --watch-label-selector of the shard's controllers.
func (s fluxShard) selector() string {
	if s.key == "" {
		return "!" + shardKey
	}
	return shardKey + "=" + s.key
}

// labels are the labels that put an object in the shard.
func (s fluxShard) labels() map[string]string {
	if s.key == "" {
		return nil
	}
	return map[string]string{shardKey: s.key}
}

// chainKind is a chain of kustomize syncs only, or one whose odd hops are
// Helm releases of the hello chart.
type chainKind struct {
	name        string
	alternating bool
}

// helmHop says whether hop i of the chain is a Helm release.
func (k chainKind) helmHop(i int) bool { return k.alternating && i%2 == 1 }

// hop is the sync name of hop i of a chain.
func hop(i int) string { return fmt.Sprintf("s%d", i) }

// BenchmarkDependencyChain measures a chain of ten dependent syncs from
// creation to all Ready, of kustomize syncs only and of Kustomizations and
// HelmReleases alternating: once through a fleeet Assemblage, and once on
// Flux's own dependsOn under each of fluxShards' --requeue-dependency. Flux
// chains only Kustomizations to Kustomizations and HelmReleases to
// HelmReleases, so its alternating chain is Flux's documented workaround:
// every HelmRelease wrapped in a Kustomization that waits for it, and the
// Kustomizations chained. All variants share one apiserver, source
// controller and local git and chart repositories. Run it with `make bench`.
func BenchmarkDependencyChain(b *testing.B) {
	c := testenv.StartCluster(b, "downstream")
	testenv.StartFlux(b, c, testenv.SourceController)
	for _, s := range fluxShards {
		testenv.StartFluxWith(b, c, testenv.FluxOptions{RequeueDependency: s.requeue, WatchLabelSelector: s.selector()},
			testenv.KustomizeController, testenv.HelmController)
	}
	e := &env{c: c, git: publishConfigs(b), charts: testenv.NewChartRepo(b, testenv.ChartDir("hello")).URL}
	// The benchmark measures gating, against a Flux baseline that impersonates
	// nobody: its Assemblages run unconfined, as Flux's Kustomizations do.
	startAgent(b, c, agent.Options{Concurrent: 4, AllowUnconfined: true})

	for _, kind := range []chainKind{{"kustomize", false}, {"alternating", true}} {
		b.Run("fleeet-"+kind.name, func(b *testing.B) {
			e.benchChain(b, true, func(ns string) []client.Object { return e.fleeetChain(ns, kind) })
		})
		for _, s := range fluxShards {
			b.Run(fmt.Sprintf("flux-requeue-%s-%s", s.requeue, kind.name), func(b *testing.B) {
				e.benchChain(b, false, func(ns string) []client.Object { return e.fluxChain(ns, kind, s) })
			})
		}
	}
}

// benchChain creates the objects chain returns in a fresh namespace and
// reports how long the chain takes to become Ready; gated says fleeet
// creates each hop's applier only once its dependency is Ready.
func (e *env) benchChain(b *testing.B, gated bool, chain func(ns string) []client.Object) {
	for b.Loop() {
		ns := e.c.Namespace(b, "bench", nil)
		rec := recordChain(b, e.c, ns)
		start := time.Now()
		for _, obj := range chain(ns) {
			if err := e.c.Client.Create(b.Context(), obj); err != nil {
				b.Fatal(err)
			}
		}
		report(b, rec.waitAllReady(b, start), rec, gated)
	}
}

// fleeetChain is one Assemblage whose syncs each depend on the one before.
func (e *env) fleeetChain(ns string, kind chainKind) []client.Object {
	var syncs []fleeetv1.NamedSync
	for i := range chainLength {
		s := e.ks(ns, hop(i), "v1.0.0", "./configmap")
		if kind.helmHop(i) {
			s = e.hr(hop(i), "hello", "1.2.3")
		}
		if i > 0 {
			s.DependsOn = dependsOn([]string{hop(i - 1)})
		}
		syncs = append(syncs, s)
	}
	return []client.Object{&fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Name: "plan", Namespace: ns},
		Spec: fleeetv1.AssemblageSpec{Syncs: syncs}}}
}

// fluxChain is one GitRepository (and, for an alternating chain, one
// HelmRepository) shared by ten Kustomizations chained with Flux's dependsOn,
// all in shard s. A Helm hop's Kustomization applies a HelmRelease and waits
// until it is Ready.
func (e *env) fluxChain(ns string, kind chainKind, s fluxShard) []client.Object {
	interval := metav1.Duration{Duration: 10 * time.Minute}
	objs := []client.Object{&sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "configs", Namespace: ns},
		Spec: sourcev1.GitRepositorySpec{URL: e.git, Interval: interval,
			Reference: &sourcev1.GitRepositoryRef{Tag: "v1.0.0"}},
	}}
	if kind.alternating {
		objs = append(objs, &sourcev1.HelmRepository{
			ObjectMeta: metav1.ObjectMeta{Name: "charts", Namespace: ns},
			Spec:       sourcev1.HelmRepositorySpec{URL: e.charts, Interval: interval},
		})
	}
	for i := range chainLength {
		labels := map[string]string{fleeetv1.SyncLabel: hop(i)}
		maps.Copy(labels, s.labels())
		ks := &kustomizev1.Kustomization{
			ObjectMeta: metav1.ObjectMeta{Name: hop(i), Namespace: ns, Labels: labels},
			Spec: kustomizev1.KustomizationSpec{
				Interval: interval, Path: "./configmap", Prune: true, TargetNamespace: ns,
				SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: "configs"},
				PostBuild: &kustomizev1.PostBuild{Substitute: map[string]string{"id": hop(i)}},
			},
		}
		if kind.helmHop(i) {
			// The HelmRelease joins the shard through the labels
			// Kustomization stamps on what it applies.
			ks.Spec.Path, ks.Spec.Wait = "./helmrelease", true
			ks.Spec.CommonMetadata = &kustomizev1.CommonMetadata{Labels: s.labels()}
		}
		if i > 0 {
			ks.Spec.DependsOn = []kustomizev1.DependencyReference{{Name: hop(i - 1)}}
		}
		objs = append(objs, ks)
	}
	return objs
}

// chainRecorder watches the Kustomizations and HelmReleases of one namespace
// and records, by sync name, when each was first seen and when it first
// became Ready. Objects without a sync label (the HelmReleases Flux's
// Kustomizations apply) are not hops of the chain.
type chainRecorder struct {
	mu      sync.Mutex
	created map[string]time.Time
	ready   map[string]time.Time
	changed chan struct{}
}

func recordChain(b *testing.B, c *testenv.Cluster, ns string) *chainRecorder {
	wc, err := client.NewWithWatch(c.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	r := &chainRecorder{created: map[string]time.Time{}, ready: map[string]time.Time{}, changed: make(chan struct{}, 1)}
	for _, list := range []client.ObjectList{&kustomizev1.KustomizationList{}, &helmv2.HelmReleaseList{}} {
		w, err := wc.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					r.observe(ev.Object)
				}
			}
		}()
	}
	return r
}

// observe records what one watch event says of its object.
func (r *chainRecorder) observe(obj runtime.Object) {
	observed, conds, ok := flux.ApplierStatus(obj)
	if !ok {
		return
	}
	meta := obj.(client.Object)
	name := meta.GetLabels()[fleeetv1.SyncLabel]
	if name == "" {
		return
	}
	now := time.Now()
	r.mu.Lock()
	if _, seen := r.created[name]; !seen {
		r.created[name] = now
	}
	if _, seen := r.ready[name]; !seen && apimeta.IsStatusConditionTrue(conds, fluxmeta.ReadyCondition) &&
		observed == meta.GetGeneration() {
		r.ready[name] = now
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitAllReady waits until every sync of the chain is Ready and returns the
// time from start until the last one became Ready.
func (r *chainRecorder) waitAllReady(b *testing.B, start time.Time) time.Duration {
	deadline := time.After(15 * time.Minute)
	for {
		r.mu.Lock()
		n, last := len(r.ready), start
		for _, t := range r.ready {
			if t.After(last) {
				last = t
			}
		}
		r.mu.Unlock()
		if n == chainLength {
			return last.Sub(start)
		}
		select {
		case <-r.changed:
		case <-deadline:
			b.Fatalf("chain not ready after 15 minutes: %d of %d ready", n, chainLength)
		}
	}
}

// report publishes the chain's total time, the mean time from one sync
// becoming Ready to the next becoming Ready, and, where dependents are
// created only once their dependency is Ready (gated), the mean time from a
// sync becoming Ready to its dependent's Kustomization appearing: fleeet's
// gating overhead per hop.
func report(b *testing.B, total time.Duration, r *chainRecorder, gated bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gate, hop time.Duration
	for i := 1; i < chainLength; i++ {
		prev, cur := fmt.Sprintf("s%d", i-1), fmt.Sprintf("s%d", i)
		gate += max(0, r.created[cur].Sub(r.ready[prev]))
		hop += r.ready[cur].Sub(r.ready[prev])
	}
	b.ReportMetric(total.Seconds(), "s/chain")
	b.ReportMetric(float64(hop.Milliseconds())/(chainLength-1), "ms/hop")
	if gated {
		b.ReportMetric(float64(gate.Milliseconds())/(chainLength-1), "gate-ms/hop")
	}
}
