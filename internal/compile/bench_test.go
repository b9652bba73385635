package compile_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
)

// benchRegions are the regions the benchmark's Remotes spread over.
var benchRegions = []string{"eu", "us", "ap", "sa", "af"}

// benchFleet is 1,000 Remotes, each labelled with a region and an env, and
// 50 Modules selecting all of them, half helm and half kustomize. With
// overrides, every Module has one override per region and one for prod,
// so each Remote is picked by two overrides of every Module.
func benchFleet(overrides bool) ([]fleeetv1.Remote, []fleeetv1.Module) {
	remotes := make([]fleeetv1.Remote, 1000)
	for i := range remotes {
		env := "prod"
		if i%4 == 0 {
			env = "staging"
		}
		remotes[i] = *edge(fmt.Sprintf("edge-%04d", i), map[string]string{"region": benchRegions[i%len(benchRegions)], "env": env})
	}
	modules := make([]fleeetv1.Module, 50)
	for i := range modules {
		m := module(fmt.Sprintf("app-%02d", i), "v1.0.0", map[string]string{"tier": "app"})
		m.Spec.Selector = &metav1.LabelSelector{}
		m.UID = types.UID(m.Name)
		helm := i%2 == 0
		if helm {
			m.Spec.Sync = fleeetv1.SyncSpec{
				Source: fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "podinfo", Version: "6.7.1"}},
				Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{Values: &apiextensionsv1.JSON{Raw: []byte(
					`{"replicaCount":2,"ui":{"message":"hello","color":"#34577c"},"resources":{"requests":{"cpu":"10m","memory":"16Mi"}},"ingress":{"enabled":false}}`)}}},
			}
		} else {
			m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"ENV": "prod", "SIZE": "s"}
			m.Spec.Sync.Package.Kustomize.Images = []fleeetv1.KustomizeImage{{Name: "web", NewTag: "1.0"}}
		}
		if overrides {
			for _, r := range benchRegions {
				o := fleeetv1.Override{Name: r, Selector: metav1.LabelSelector{MatchLabels: map[string]string{"region": r}}}
				if helm {
					o.Helm = &fleeetv1.HelmOverride{Values: &apiextensionsv1.JSON{Raw: []byte(`{"ui":{"message":"hello from ` + r + `"}}`)}}
				} else {
					o.Kustomize = &fleeetv1.KustomizeOverride{Substitute: map[string]string{"REGION": r},
						Images: []fleeetv1.KustomizeImage{{Name: "web", NewName: r + ".mirror.example.com/web"}}}
				}
				m.Spec.Overrides = append(m.Spec.Overrides, o)
			}
			prod := fleeetv1.Override{Name: "prod", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}
			if helm {
				prod.Helm = &fleeetv1.HelmOverride{Values: &apiextensionsv1.JSON{Raw: []byte(`{"replicaCount":3}`)}}
			} else {
				prod.Kustomize = &fleeetv1.KustomizeOverride{Patches: []fleeetv1.KustomizePatch{{
					Patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n"}}}
			}
			m.Spec.Overrides = append(m.Spec.Overrides, prod)
		}
		modules[i] = *m
	}
	return remotes, modules
}

// BenchmarkPlanFleet is the compiler's cost for a whole fleet of 1,000
// Remotes × 50 Modules: one op is a version change of one Module, for which
// every Remote's plan is compiled again, against the plan it holds and
// within the default size limit, as the manager does (remembering each
// Module's revision across Remotes). overrides=false is the fleet as it was before
// overrides; overrides=true gives every Remote two overrides of each Module.
func BenchmarkPlanFleet(b *testing.B) {
	for _, overrides := range []bool{false, true} {
		b.Run(fmt.Sprintf("overrides=%v", overrides), func(b *testing.B) {
			remotes, modules := benchFleet(overrides)
			limit := compile.Limit{MaxBytes: compile.DefaultMaxPlanBytes}
			plans := make([]compile.Parts, len(remotes))
			revisions := &compile.Revisions{}
			compileAll := func() {
				for i := range remotes {
					syncs, _, err := compile.Plan(b.Context(), nil, modules, &remotes[i], plans[i], limit, revisions)
					if err != nil {
						b.Fatal(err)
					}
					plans[i] = syncs
				}
			}
			compileAll()
			if overrides && plans[1][0][0].Package.Helm.Values == nil {
				b.Fatal("no values compiled")
			}
			cpu := cpuTime()
			versions := []string{"6.7.2", "6.7.1"}
			for i := 0; b.Loop(); i++ {
				modules[0].Spec.Sync.Source.Helm.Version = versions[i%2]
				modules[0].Generation++
				compileAll()
			}
			// CPU time is steadier than wall time on a shared machine.
			b.ReportMetric((cpuTime()-cpu).Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}

// cpuTime is the CPU time the process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
