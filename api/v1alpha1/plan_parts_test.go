package v1alpha1_test

import (
	"fmt"
	"slices"
	"testing"

	. "github.com/onsi/gomega"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestPlanPartNamesRoundTrip(t *testing.T) {
	g := NewWithT(t)
	for _, plan := range []string{"edge-1", "mgmt.example.com", "a"} {
		names := fleeetv1.PlanPartNames(plan)
		g.Expect(names).To(HaveLen(fleeetv1.MaxPlanParts))
		for k, name := range names {
			gotPlan, gotPart := fleeetv1.PlanOfPart(name)
			g.Expect(gotPlan).To(Equal(plan), name)
			g.Expect(gotPart).To(Equal(k), name)
		}
	}
	// Names that only look like parts are plans of their own.
	for _, name := range []string{"web.p0", "web.p8", "web.p01", "web.px", "web.p", "web.p-1"} {
		plan, part := fleeetv1.PlanOfPart(name)
		g.Expect(plan).To(Equal(name))
		g.Expect(part).To(BeZero())
	}
}

func TestWholeNeedsEveryListedPartAtItsRevision(t *testing.T) {
	g := NewWithT(t)
	first := &fleeetv1.AssemblageSpec{Parts: []string{"r1", "r2"}}
	p1, p2 := &fleeetv1.AssemblageSpec{PartRevision: "r1"}, &fleeetv1.AssemblageSpec{PartRevision: "r2"}
	g.Expect(first.Whole([]*fleeetv1.AssemblageSpec{p1, p2})).To(Succeed())
	g.Expect(first.Whole([]*fleeetv1.AssemblageSpec{p1})).To(MatchError(ContainSubstring("part 2 of 3 not read yet")))
	g.Expect(first.Whole([]*fleeetv1.AssemblageSpec{nil, p2})).To(MatchError(ContainSubstring("part 1 of 3 not read yet")))
	behind := &fleeetv1.AssemblageSpec{PartRevision: "r0"}
	g.Expect(first.Whole([]*fleeetv1.AssemblageSpec{p1, behind})).To(MatchError(ContainSubstring(`part 2 of 3 is at revision "r0", the plan lists "r2"`)))
	g.Expect((&fleeetv1.AssemblageSpec{}).Whole(nil)).To(Succeed())
}

func TestProxyPlansGroupPartsAndFindTheHoldingOne(t *testing.T) {
	g := NewWithT(t)
	pa := func(name string, syncs ...string) fleeetv1.ProxyAssemblage {
		p := fleeetv1.ProxyAssemblage{}
		p.Name, p.Generation = name, 3
		p.Status.ObservedGeneration = 3
		for _, s := range syncs {
			p.Spec.Assemblage.Syncs = append(p.Spec.Assemblage.Syncs, fleeetv1.NamedSync{Name: s})
			p.Status.Syncs = append(p.Status.Syncs, fleeetv1.SyncStatus{Name: s, State: fleeetv1.SyncReady})
		}
		return p
	}
	plans := fleeetv1.GroupProxyPlans([]fleeetv1.ProxyAssemblage{pa("edge.p2", "c"), pa("edge", "a"), pa("other", "a")})
	g.Expect(plans).To(HaveLen(2))
	edge := plans["edge"]
	g.Expect(edge).To(HaveLen(3))
	g.Expect(edge[1]).To(BeNil())
	g.Expect(edge.Holding("c").Name).To(Equal("edge.p2"))
	g.Expect(edge.Holding("b")).To(BeNil())
	g.Expect(edge.ReportedSync("c").State).To(Equal(fleeetv1.SyncReady))
	g.Expect(edge.ReportedSync("b")).To(BeNil())
}

func TestAPlanIsThePartsItsFirstPartLists(t *testing.T) {
	g := NewWithT(t)
	// pa is part 0 listing parts, or a further part at the revision its
	// number gives (edge.p2 at r2).
	pa := func(name string, parts []string, syncs ...string) fleeetv1.ProxyAssemblage {
		p := fleeetv1.ProxyAssemblage{}
		p.Name, p.Spec.Assemblage.Parts = name, parts
		if _, k := fleeetv1.PlanOfPart(name); k > 0 {
			p.Spec.Assemblage.PartRevision = fmt.Sprintf("r%d", k)
		}
		for _, s := range syncs {
			p.Spec.Assemblage.Syncs = append(p.Spec.Assemblage.Syncs, fleeetv1.NamedSync{Name: s})
		}
		return p
	}
	names := func(syncs []fleeetv1.NamedSync) []string {
		var n []string
		for _, s := range syncs {
			n = append(n, s.Name)
		}
		return n
	}
	plans := fleeetv1.GroupProxyPlans([]fleeetv1.ProxyAssemblage{
		// edge lists two further parts, one of them not read, and has a
		// third on its way out.
		pa("edge", []string{"r1", "r2"}, "a"), pa("edge.p2", nil, "c"), pa("edge.p3", nil, "gone"),
		// one is a plan in one object, with a part not published yet.
		pa("one", nil, "a"), pa("one.p1", nil, "early"),
		// new has only a further part so far: nothing is published.
		pa("new.p1", nil, "b"),
	})
	edge := plans["edge"].Listed()
	g.Expect(edge).To(HaveLen(3))
	g.Expect(edge[1]).To(BeNil())
	g.Expect(names(edge.Syncs())).To(Equal([]string{"a", "c"}))
	g.Expect(edge.Holding("gone")).To(BeNil())
	g.Expect(names(plans["one"].Listed().Syncs())).To(Equal([]string{"a"}))
	g.Expect(plans["new"].Listed()).To(BeNil())
	g.Expect(fleeetv1.ProxyPlan(nil).Listed()).To(BeNil())

	// A part rewritten but not published yet is not in the plan either:
	// what it holds now is not what the cluster has been told to run.
	rewritten := fleeetv1.GroupProxyPlans([]fleeetv1.ProxyAssemblage{pa("edge", []string{"r1"}, "a"), pa("edge.p1", nil, "b")})["edge"]
	rewritten[1].Spec.Assemblage.PartRevision = "r1-next"
	g.Expect(rewritten.Listed()).To(HaveLen(2))
	g.Expect(rewritten.Listed()[1]).To(BeNil())
	g.Expect(rewritten.Listed().Holding("b")).To(BeNil())
}

// BenchmarkFindASyncInEveryPlan is what one Module reconcile does at
// 1,000 Remotes with 50 syncs each: find the Module's sync in every
// Remote's plan, by plan object name as before plans were split ("by-name")
// and through the grouped, listed parts ("grouped").
func BenchmarkFindASyncInEveryPlan(b *testing.B) {
	const remotes, syncs = 1000, 50
	items := make([]fleeetv1.ProxyAssemblage, remotes)
	for i := range items {
		items[i].Name = fmt.Sprintf("edge-%04d", i)
		for s := range syncs {
			items[i].Spec.Assemblage.Syncs = append(items[i].Spec.Assemblage.Syncs, fleeetv1.NamedSync{Name: fmt.Sprintf("module-%02d", s)})
		}
	}
	want := fmt.Sprintf("module-%02d", syncs-1)
	b.Run("by-name", func(b *testing.B) {
		for b.Loop() {
			byName := map[string]*fleeetv1.ProxyAssemblage{}
			for i := range items {
				byName[items[i].Name] = &items[i]
			}
			for i := range remotes {
				pa := byName[items[i].Name]
				if !slices.ContainsFunc(pa.Spec.Assemblage.Syncs, func(s fleeetv1.NamedSync) bool { return s.Name == want }) {
					b.Fatal("not held")
				}
			}
		}
	})
	b.Run("grouped", func(b *testing.B) {
		for b.Loop() {
			plans := fleeetv1.GroupProxyPlans(items)
			for i := range remotes {
				if plans[items[i].Name].Listed().Holding(want) == nil {
					b.Fatal("not held")
				}
			}
		}
	})
}
