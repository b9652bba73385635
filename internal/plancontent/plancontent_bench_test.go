package plancontent_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// BenchmarkReadingAPlan reads a plan part whose 50 entries are in the
// CompiledPlan it names, as the compiler, the webhook and every agent do:
// its entries (Entries), and its syncs whole (ResolvePlan).
func BenchmarkReadingAPlan(b *testing.B) {
	var entries []fleeetv1.NamedSync
	syncs := map[string]*fleeetv1.CompiledSync{}
	for i := range 50 {
		name := fmt.Sprintf("m%02d", i)
		entries = append(entries, fleeetv1.NamedSync{Name: name, Content: name + "-c"})
		syncs[name+"-c"] = &fleeetv1.CompiledSync{Sync: fleeetv1.NamedSync{Name: name, SyncSpec: fleeetv1.SyncSpec{Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://x/y.git", Tag: "v1"}}, Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy"}}}}}
	}
	cp := plancontent.NewPlan("team", entries, nil)
	s := plancontent.Objects{Plans: map[string]*fleeetv1.CompiledPlan{cp.Name: cp}, Syncs: syncs}
	pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Name: "edge"}}
	pa.Spec.CompiledPlan = cp.Name
	b.Run("entries", func(b *testing.B) {
		for b.Loop() {
			if _, err := plancontent.Entries(b.Context(), pa, s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("resolveplan", func(b *testing.B) {
		for b.Loop() {
			if _, err := plancontent.ResolvePlan(b.Context(), fleeetv1.ProxyPlan{pa}, s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
