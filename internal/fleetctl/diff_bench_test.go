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
	ctx := b.Context()
	ns := cluster.Namespace(b, "bench", map[string]string{fleeetv1.TenantLabel: "true"})
	var wg sync.WaitGroup
	names := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range names {
				r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("edge-%04d", i)}}
				if err := cluster.Client.Create(ctx, r); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range benchRemotes {
		names <- i
	}
	close(names)
	wg.Wait()
	m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
		Selector: &metav1.LabelSelector{},
		Sync: fleeetv1.SyncSpec{
			Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}},
			Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy", TargetNamespace: ns}},
		},
	}}}
	if err := cluster.Client.Create(ctx, m); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		pas := &fleeetv1.ProxyAssemblageList{}
		if err := cluster.Client.List(ctx, pas, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		if len(pas.Items) == benchRemotes {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d plans compiled", len(pas.Items), benchRemotes)
		}
		time.Sleep(time.Second)
	}
	file := manifest(b, ns, "app", func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v1.1.0" })
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
