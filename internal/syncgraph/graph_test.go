package syncgraph

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func sync(name string, labels map[string]string, deps ...fleeetv1.Dependency) fleeetv1.NamedSync {
	return fleeetv1.NamedSync{Name: name, Labels: labels, SyncSpec: fleeetv1.SyncSpec{DependsOn: deps}}
}

func on(name string) fleeetv1.Dependency { return fleeetv1.Dependency{Name: name} }

func onLabels(l map[string]string) fleeetv1.Dependency {
	return fleeetv1.Dependency{Selector: &metav1.LabelSelector{MatchLabels: l}}
}

func TestBuildGraphResolvesNamesAndSelectors(t *testing.T) {
	g := NewWithT(t)
	platform := map[string]string{"tier": "platform"}
	gr := Build([]fleeetv1.NamedSync{
		sync("crds", platform),
		sync("cni", platform, on("crds")),
		sync("app", nil, onLabels(platform), on("crds"), on("ghost")),
		sync("self-selecting", platform, onLabels(platform)),
	})
	g.Expect(gr.Deps["app"]).To(Equal([]string{"cni", "crds", "self-selecting"}))
	g.Expect(gr.Missing["app"]).To(Equal([]string{"ghost"}))
	g.Expect(gr.Deps["self-selecting"]).To(Equal([]string{"cni", "crds"}), "a selector never selects its own sync")
	g.Expect(gr.Cycles).To(BeEmpty())
}

func TestBuildGraphNamesEveryCycle(t *testing.T) {
	cases := []struct {
		name   string
		syncs  []fleeetv1.NamedSync
		cycles map[string]string
	}{{
		name:   "self",
		syncs:  []fleeetv1.NamedSync{sync("a", nil, on("a"))},
		cycles: map[string]string{"a": "a → a"},
	}, {
		name:   "three",
		syncs:  []fleeetv1.NamedSync{sync("a", nil, on("b")), sync("b", nil, on("c")), sync("c", nil, on("a")), sync("d", nil, on("a"))},
		cycles: map[string]string{"a": "a → b → c → a", "b": "b → c → a → b", "c": "c → a → b → c"},
	}, {
		name: "through a selector",
		syncs: []fleeetv1.NamedSync{
			sync("a", map[string]string{"x": "1"}, on("b")),
			sync("b", nil, onLabels(map[string]string{"x": "1"})),
		},
		cycles: map[string]string{"a": "a → b → a", "b": "b → a → b"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			gr := Build(tc.syncs)
			got := map[string]string{}
			for name, c := range gr.Cycles {
				got[name] = CycleString(c)
			}
			g.Expect(got).To(Equal(tc.cycles))
		})
	}
}

func TestBuildGraphReportsAnInvalidSelector(t *testing.T) {
	g := NewWithT(t)
	bad := fleeetv1.Dependency{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "tier", Operator: "Near"}}}}
	gr := Build([]fleeetv1.NamedSync{sync("a", nil, bad)})
	g.Expect(gr.Invalid["a"]).To(HavePrefix("dependsOn[0].selector: "))
}

func requiredBy(s fleeetv1.NamedSync, sel *metav1.LabelSelector) fleeetv1.NamedSync {
	s.RequiredBy = sel
	return s
}

func TestRequiredByMakesTheSyncsItSelectsWaitForIt(t *testing.T) {
	g := NewWithT(t)
	app := map[string]string{"tier": "app"}
	gr := Build([]fleeetv1.NamedSync{
		requiredBy(sync("cni", nil), &metav1.LabelSelector{}),
		requiredBy(sync("db", nil), &metav1.LabelSelector{MatchLabels: app}),
		sync("web", app, on("cache")),
		sync("cache", nil),
	})
	g.Expect(gr.Deps["web"]).To(Equal([]string{"cache", "cni", "db"}))
	g.Expect(gr.Deps["cache"]).To(Equal([]string{"cni"}))
	g.Expect(gr.Deps["db"]).To(Equal([]string{"cni"}), "everything waits for the CNI, another prerequisite too")
	g.Expect(gr.Deps["cni"]).To(BeEmpty(), "requiredBy never selects its own sync")
	g.Expect(gr.Cycles).To(BeEmpty())
	g.Expect(gr.Missing).To(BeEmpty(), "a prerequisite not in the plan holds nothing")
}

func TestTwoSyncsRequiredByEachOtherAreACycle(t *testing.T) {
	g := NewWithT(t)
	gr := Build([]fleeetv1.NamedSync{
		requiredBy(sync("a", nil), &metav1.LabelSelector{}),
		requiredBy(sync("b", nil), &metav1.LabelSelector{}),
	})
	g.Expect(CycleString(gr.Cycles["a"])).To(Equal("a → b → a"))
}

func TestAnInvalidRequiredBySelectorIsReportedAndSelectsNothing(t *testing.T) {
	g := NewWithT(t)
	gr := Build([]fleeetv1.NamedSync{
		requiredBy(sync("a", nil), &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}}),
		sync("b", nil),
	})
	g.Expect(gr.Invalid["a"]).To(HavePrefix("requiredBy: "))
	g.Expect(gr.Deps["b"]).To(BeEmpty())
}

func TestTheStrictestEntryDecidesAtWhichVersionADependencyCounts(t *testing.T) {
	g := NewWithT(t)
	platform := map[string]string{"tier": "platform"}
	anyOf := func(d fleeetv1.Dependency) fleeetv1.Dependency { d.ReadyAt = fleeetv1.ReadyAtAny; return d }
	gr := Build([]fleeetv1.NamedSync{
		sync("crds", platform),
		sync("cni", platform),
		requiredBy(sync("mesh", nil), &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}),
		sync("web", map[string]string{"app": "web"}, anyOf(onLabels(platform)), on("cni"), anyOf(on("mesh"))),
	})
	g.Expect(gr.Deps["web"]).To(Equal([]string{"cni", "crds", "mesh"}))
	g.Expect(gr.AnyVersion["web"]).To(Equal(map[string]bool{"crds": true}),
		"cni is also named at its desired version, mesh requires web at its desired version")
}

func TestEveryEntryThatSelectsADependencyAddsItsReadyExpr(t *testing.T) {
	g := NewWithT(t)
	platform := map[string]string{"tier": "platform"}
	expr := func(d fleeetv1.Dependency, e string) fleeetv1.Dependency { d.ReadyExpr = e; return d }
	gr := Build([]fleeetv1.NamedSync{
		sync("crds", platform),
		sync("cni", platform),
		sync("web", nil, expr(onLabels(platform), "a"), expr(on("cni"), "b"), expr(on("cni"), "a")),
	})
	g.Expect(gr.ReadyExprs["web"]).To(Equal(map[string][]string{"crds": {"a"}, "cni": {"a", "b"}}),
		"cni must pass both expressions that select it, each once")
	g.Expect(gr.ReadyExprs).NotTo(HaveKey("cni"))
}
