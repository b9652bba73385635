package fleetctl_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetctl"
)

const benchRemotes = 1000

// BenchmarkDiff times fleetctl diff of a version bump of a Module that
// selects 1,000 Remotes, against the test apiserver with the manager
// running (so every Remote has its compiled plan), in-process.
func BenchmarkDiff(b *testing.B) {
	ns := benchFleet(b, benchRemotes, 1)
	file := manifest(b, ns, "module-00", func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v1.1.0" })
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		out, err := run(b, ns, "diff", "-o", "json", "-f", file)
		if fleetctl.ExitCode(err) != 1 {
			b.Fatalf("%v\n%s", err, out)
		}
		b.ReportMetric(time.Since(start).Seconds(), "diff-s")
	}
}

// benchFleet makes a tenant with n Remotes and m Modules (module-00…)
// selecting all of them, and waits until the manager has compiled every
// plan with every Module.
func benchFleet(b *testing.B, n, m int) string {
	ctx := b.Context()
	ns := cluster.Namespace(b, "bench", map[string]string{fleeetv1.TenantLabel: "true"})
	create := func(count int, obj func(int) client.Object) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 8 {
			wg.Go(func() {
				for i := range next {
					if err := cluster.Client.Create(ctx, obj(i)); err != nil {
						b.Error(err)
					}
				}
			})
		}
		for i := range count {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	create(n, func(i int) client.Object {
		return &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("edge-%04d", i)}}
	})
	create(m, func(i int) client.Object {
		name := fmt.Sprintf("module-%02d", i)
		return &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: &metav1.LabelSelector{},
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/" + name + ".git", Tag: "v1.0.0"}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy", TargetNamespace: ns}},
			},
		}}}
	})
	deadline := time.Now().Add(10 * time.Minute)
	for {
		pas := &fleeetv1.ProxyAssemblageList{}
		if err := cluster.Client.List(ctx, pas, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		done := 0
		for _, pa := range pas.Items {
			if len(pa.Spec.Assemblage.Syncs) == m {
				done++
			}
		}
		if done == n {
			return ns
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d plans compiled", done, n)
		}
		time.Sleep(time.Second)
	}
}
