package manager_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// publishInterval is how often both the manager's version policy and plain
// Flux's GitRepository look at the source: the shortest a version policy
// allows.
const publishInterval = time.Minute

// BenchmarkPublishToFirstCluster measures the time from a new version
// published (a semver tag pushed to the git server) to a cluster running
// it, its Pods all Ready: through a Module whose version policy picks it
// (the manager resolves the tag, the plan carries it, the agent applies
// it), against plain Flux on the cluster following the same range
// (GitRepository spec.ref.semver), both looking at the source every
// minute. Each version is published once and both paths run it at once on
// the same node: first with a notification (the reconcile.fluxcd.io/
// requestedAt annotation a CI job sets on the Module, as `flux reconcile
// source git` sets it on the GitRepository), then polled, published at a
// random moment of the interval (seeded, the same in every run).
// Run it with `make bench`.
func BenchmarkPublishToFirstCluster(b *testing.B) {
	benchOnNodes(b, func(managerBin, agentBin string) { benchPublish(b, managerBin, agentBin) })
}

func benchPublish(b *testing.B, managerBin, agentBin string) {
	const notified, polled = 3, 3
	ctx := b.Context()
	podinfo := testenv.GetPodinfo(b)
	git := testenv.NewGitServer(b)
	repo, _ := git.Commit(b, "podinfo", podinfoAt(b, podinfo, "v1.0.0"), "v1.0.0")
	f := startPodsFleet(b, managerBin, agentBin, podinfo, 1)
	const semver = ">=1.0.0"

	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"env": "edge"}})
	m.Name, m.Namespace = "podinfo", f.tenant
	m.Spec.VersionPolicy = &fleeetv1.VersionPolicy{Semver: semver, Interval: &metav1.Duration{Duration: publishInterval}}
	m.Spec.Sync.Source.Git.URL = repo
	m.Spec.Sync.Package.Kustomize.Path = "./deploy"
	m.Spec.Sync.Package.Kustomize.TargetNamespace = f.upstream
	if err := f.mgmt.Client.Create(ctx, m); err != nil {
		b.Fatal(err)
	}
	down := f.downs[0]
	createPlainFlux(b, down, repo, &sourcev1.GitRepositoryRef{SemVer: semver}, publishInterval)
	waitFor(b, 10*time.Minute, "podinfo v1.0.0 Ready through fleeet and plain Flux", func() bool {
		return len(rolledOut(b, f.downs, f.upstream, "v1.0.0")) == 1 && len(rolledOut(b, f.downs, "flux", "v1.0.0")) == 1
	})

	path := map[string]string{f.upstream: "fleeet", "flux": "plain-flux"}
	took := map[string][]time.Duration{}
	phase := rand.New(rand.NewPCG(1, 1))
	for i := range notified + polled {
		version := fmt.Sprintf("v1.%d.0", i+1)
		how := "notified"
		if i >= notified {
			how = "polled"
			// Published at a moment the looks do not know of: right after
			// the round before, the next look would always be as far off.
			time.Sleep(time.Duration(phase.Int64N(int64(publishInterval))))
		}
		start := time.Now()
		git.Commit(b, "podinfo", podinfoAt(b, podinfo, version), version)
		if how == "notified" {
			at := start.Format(time.RFC3339Nano)
			requestReconcile(b, f.mgmt.Client, m, at)
			requestReconcile(b, down.Client, &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "flux", Name: "podinfo"}}, at)
		}
		for ns, d := range untilRolledOut(b, f.downs, version, start, f.upstream, "flux") {
			took[how+"/"+path[ns]] = append(took[how+"/"+path[ns]], d)
		}
	}
	for _, how := range []string{"notified", "polled"} {
		fleeet, flux := took[how+"/fleeet"], took[how+"/plain-flux"]
		b.Logf("%s: fleeet %v, plain Flux %v", how, fleeet, flux)
		fleeetMedian, fluxMedian := percentile(slices.Sorted(slices.Values(fleeet)), 50), percentile(slices.Sorted(slices.Values(flux)), 50)
		b.ReportMetric(fleeetMedian.Seconds(), how+"-fleeet-median-s")
		b.ReportMetric(slices.Max(fleeet).Seconds(), how+"-fleeet-max-s")
		b.ReportMetric(fluxMedian.Seconds(), how+"-plain-flux-median-s")
		b.ReportMetric(slices.Max(flux).Seconds(), how+"-plain-flux-max-s")
		b.ReportMetric(fleeetMedian.Seconds()/fluxMedian.Seconds(), how+"-fleeet/flux")
	}
}

// requestReconcile sets reconcile.fluxcd.io/requestedAt on obj (its name
// and namespace set) to at, as `flux reconcile` and a CI job's
// notification do.
func requestReconcile[T client.Object](b *testing.B, c client.Client, obj T, at string) {
	if err := testenv.Change(b.Context(), c, obj, func(obj T) {
		annotations := maps.Clone(obj.GetAnnotations())
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[meta.ReconcileRequestAnnotation] = at
		obj.SetAnnotations(annotations)
	}); err != nil {
		b.Fatal(err)
	}
}
