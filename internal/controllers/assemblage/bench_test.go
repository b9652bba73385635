package assemblage_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const chainLength = 10

// BenchmarkDependencyChain measures a chain of ten dependent kustomize syncs
// from creation to all Ready: once through a fleeet Assemblage, once as ten
// Flux Kustomizations chained with Flux's own dependsOn, on the same
// apiserver and Flux controllers (Flux defaults, --requeue-dependency=30s).
// Run it with `make bench`.
func BenchmarkDependencyChain(b *testing.B) {
	c := testenv.StartCluster(b, "downstream")
	testenv.StartFlux(b, c, testenv.SourceController, testenv.KustomizeController)
	e := &env{c: c, git: publishConfigs(b)}
	// The benchmark measures gating, against a Flux baseline that impersonates
	// nobody: its Assemblages run unconfined, as Flux's Kustomizations do.
	startAgent(b, c, agent.Options{Concurrent: 4, AllowUnconfined: true})

	b.Run("fleeet", func(b *testing.B) {
		for b.Loop() {
			ns := c.Namespace(b, "bench-fleeet", nil)
			var syncs []fleeetv1.NamedSync
			for i := range chainLength {
				s := e.ks(ns, fmt.Sprintf("s%d", i), "v1.0.0", "./configmap")
				if i > 0 {
					s.DependsOn = dependsOn([]string{fmt.Sprintf("s%d", i-1)})
				}
				syncs = append(syncs, s)
			}
			rec := recordChain(b, c, ns)
			start := time.Now()
			asm := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Name: "plan", Namespace: ns},
				Spec: fleeetv1.AssemblageSpec{Syncs: syncs}}
			if err := c.Client.Create(b.Context(), asm); err != nil {
				b.Fatal(err)
			}
			report(b, rec.waitAllReady(b, start), rec, true)
		}
	})

	b.Run("flux-dependsOn", func(b *testing.B) {
		for b.Loop() {
			ns := c.Namespace(b, "bench-flux", nil)
			rec := recordChain(b, c, ns)
			start := time.Now()
			repo := &sourcev1.GitRepository{
				ObjectMeta: metav1.ObjectMeta{Name: "configs", Namespace: ns},
				Spec: sourcev1.GitRepositorySpec{URL: e.git, Interval: metav1.Duration{Duration: 10 * time.Minute},
					Reference: &sourcev1.GitRepositoryRef{Tag: "v1.0.0"}},
			}
			if err := c.Client.Create(b.Context(), repo); err != nil {
				b.Fatal(err)
			}
			for i := range chainLength {
				ks := &kustomizev1.Kustomization{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i), Namespace: ns,
						Labels: map[string]string{fleeetv1.SyncLabel: fmt.Sprintf("s%d", i)}},
					Spec: kustomizev1.KustomizationSpec{
						Interval: metav1.Duration{Duration: 10 * time.Minute}, Path: "./configmap", Prune: true,
						TargetNamespace: ns,
						SourceRef:       kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: "configs"},
						PostBuild:       &kustomizev1.PostBuild{Substitute: map[string]string{"id": fmt.Sprintf("s%d", i)}},
					},
				}
				if i > 0 {
					ks.Spec.DependsOn = []kustomizev1.DependencyReference{{Name: fmt.Sprintf("s%d", i-1)}}
				}
				if err := c.Client.Create(b.Context(), ks); err != nil {
					b.Fatal(err)
				}
			}
			report(b, rec.waitAllReady(b, start), rec, false)
		}
	})
}

// chainRecorder watches the Kustomizations of one namespace and records, by
// sync name, when each was first seen and when it first became Ready.
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
	w, err := wc.Watch(ctx, &kustomizev1.KustomizationList{}, client.InNamespace(ns))
	if err != nil {
		b.Fatal(err)
	}
	r := &chainRecorder{created: map[string]time.Time{}, ready: map[string]time.Time{}, changed: make(chan struct{}, 1)}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			ks, ok := ev.Object.(*kustomizev1.Kustomization)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			now, name := time.Now(), ks.Labels[fleeetv1.SyncLabel]
			r.mu.Lock()
			if _, seen := r.created[name]; !seen {
				r.created[name] = now
			}
			ready := apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition)
			if _, seen := r.ready[name]; !seen && ready != nil && ready.Status == metav1.ConditionTrue &&
				ks.Status.ObservedGeneration == ks.Generation {
				r.ready[name] = now
			}
			r.mu.Unlock()
			select {
			case r.changed <- struct{}{}:
			default:
			}
		}
	}()
	return r
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
