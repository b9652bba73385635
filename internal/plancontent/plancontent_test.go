package plancontent_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

func sync(tag string) fleeetv1.NamedSync {
	return fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example/app", Tag: tag}},
		Secrets: []fleeetv1.SecretDelivery{{Name: "creds"}},
	}}
}

// A name depends on the Module, its UID (the key) and the sync, and on
// nothing else: the same sync of the same Module always gets it, and
// without the UID nobody can work it out.
func TestNamesAreKeyedWithTheModulesUID(t *testing.T) {
	g := NewWithT(t)
	m := &metav1.ObjectMeta{Name: "app", UID: "11111111-2222-3333-4444-555555555555"}
	v1, v2 := sync("v1"), sync("v2")
	name := plancontent.Name(m, &v1)
	g.Expect(name).To(MatchRegexp(`^app-[0-9a-f]{20}$`))
	g.Expect(plancontent.Name(m, &v1)).To(Equal(name))
	g.Expect(plancontent.Name(m, &v2)).NotTo(Equal(name))
	g.Expect(plancontent.Name(&metav1.ObjectMeta{Name: "app", UID: "another"}, &v1)).NotTo(Equal(name))
}

// An entry carries the sync's name, its content's and its Secrets; Resolve
// gives the sync back whole, refuses content holding another sync, and
// returns syncs naming no content as they are.
func TestResolveGivesEntriesBackWhole(t *testing.T) {
	g := NewWithT(t)
	whole := sync("v1")
	entry := plancontent.Entry(&whole, "app-0123")
	g.Expect(entry).To(Equal(fleeetv1.NamedSync{Name: "app", Content: "app-0123",
		SyncSpec: fleeetv1.SyncSpec{Secrets: whole.Secrets}}))
	get := plancontent.Objects{Syncs: map[string]*fleeetv1.CompiledSync{
		"app-0123":  {Sync: whole},
		"other-987": {Sync: fleeetv1.NamedSync{Name: "other"}},
	}}
	got, err := plancontent.Resolve(t.Context(), []fleeetv1.NamedSync{entry}, get)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]fleeetv1.NamedSync{whole}))

	_, err = plancontent.Resolve(t.Context(), []fleeetv1.NamedSync{{Name: "app", Content: "other-987"}}, get)
	g.Expect(err).To(MatchError(`CompiledSync other-987 holds sync "other", not "app"`))
	_, err = plancontent.Resolve(t.Context(), []fleeetv1.NamedSync{{Name: "app", Content: "gone"}}, get)
	g.Expect(err).To(MatchError(ContainSubstring("reading CompiledSync gone of sync app")))

	plain := []fleeetv1.NamedSync{whole}
	same, err := plancontent.Resolve(t.Context(), plain, get)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(&same[0]).To(BeIdenticalTo(&plain[0]), "nothing to resolve, nothing copied")
}

// The cache reads each name once and forgets what the plan no longer names.
func TestCacheReadsEachNameOnce(t *testing.T) {
	g := NewWithT(t)
	reads := 0
	c := &plancontent.Cache{From: countingStore{reads: &reads}}
	for range 3 {
		_, err := c.CompiledSync(t.Context(), "a")
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.CompiledPlan(t.Context(), "p")
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.CompiledSync(t.Context(), "b")
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(reads).To(Equal(3))
	// The plan names p, which names b: a is forgotten, p and b kept.
	pa := &fleeetv1.ProxyAssemblage{Spec: fleeetv1.ProxyAssemblageSpec{CompiledPlan: "p"}}
	c.Keep(fleeetv1.ProxyPlan{pa})
	for _, name := range []string{"a", "b"} {
		_, err := c.CompiledSync(t.Context(), name)
		g.Expect(err).NotTo(HaveOccurred())
	}
	_, err := c.CompiledPlan(t.Context(), "p")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reads).To(Equal(4), "a read again, p and b from the cache")
}

// countingStore counts its reads; CompiledPlan p names CompiledSync b.
type countingStore struct{ reads *int }

func (c countingStore) CompiledSync(_ context.Context, name string) (*fleeetv1.CompiledSync, error) {
	*c.reads++
	return &fleeetv1.CompiledSync{Sync: fleeetv1.NamedSync{Name: name}}, nil
}

func (c countingStore) CompiledPlan(_ context.Context, name string) (*fleeetv1.CompiledPlan, error) {
	*c.reads++
	return &fleeetv1.CompiledPlan{Spec: fleeetv1.CompiledPlanSpec{Entries: []fleeetv1.NamedSync{{Name: "b", Content: "b"}}}}, nil
}

// A CompiledPlan's name is a hash of its entries and stamps: Remotes whose
// parts hold the same share one, and a change of either is another.
func TestCompiledPlansAreNamedByWhatTheyHold(t *testing.T) {
	g := NewWithT(t)
	entries := []fleeetv1.NamedSync{{Name: "a", Content: "a-0123"}, {Name: "b", Content: "b-4567"}}
	stamps := map[string]fleeetv1.Compiled{"a": {Generation: 1, Revision: "v1"}, "b": {Generation: 3, Revision: "v2"}}
	cp := plancontent.NewPlan("team", entries, stamps)
	g.Expect(cp.Name).To(MatchRegexp(`^plan-[0-9a-f]{20}$`))
	g.Expect(cp.Namespace).To(Equal("team"))
	g.Expect(plancontent.NewPlan("team", entries, stamps).Name).To(Equal(cp.Name))
	g.Expect(plancontent.NewPlan("team", entries[:1], stamps).Name).NotTo(Equal(cp.Name))
	g.Expect(plancontent.NewPlan("team", entries, map[string]fleeetv1.Compiled{"a": {Generation: 2, Revision: "v1"}}).Name).NotTo(Equal(cp.Name))
}

// A part naming a CompiledPlan holds its own entries and the CompiledPlan's
// together, sorted by name, and its stamps are the ones the annotation's
// CompiledPlan holds. A CompiledPlan with anything but bare references, or
// repeating one of the part's own, is refused: it is not the compiler's.
func TestEntriesJoinThePartsOwnAndItsCompiledPlans(t *testing.T) {
	g := NewWithT(t)
	shared := plancontent.NewPlan("team", []fleeetv1.NamedSync{{Name: "a", Content: "a-1"}, {Name: "c", Content: "c-1"}},
		map[string]fleeetv1.Compiled{"a": {Generation: 4}})
	s := plancontent.Objects{Plans: map[string]*fleeetv1.CompiledPlan{shared.Name: shared}}
	pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Name: "edge",
		Annotations: map[string]string{fleeetv1.CompiledPlanAnnotation: shared.Name}}}
	pa.Spec.CompiledPlan = shared.Name
	pa.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{{Name: "b", Content: "b-1", SyncSpec: fleeetv1.SyncSpec{Secrets: []fleeetv1.SecretDelivery{{Name: "creds"}}}}}
	entries, err := plancontent.Entries(t.Context(), pa, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(Equal([]fleeetv1.NamedSync{shared.Spec.Entries[0], pa.Spec.Assemblage.Syncs[0], shared.Spec.Entries[1]}))
	stamps, err := plancontent.Stamps(t.Context(), pa, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stamps).To(Equal(shared.Spec.Compiled))

	forged := plancontent.NewPlan("team", []fleeetv1.NamedSync{{Name: "a", Content: "a-1", SyncSpec: fleeetv1.SyncSpec{Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://evil.example/x"}}}}}, nil)
	repeats := plancontent.NewPlan("team", []fleeetv1.NamedSync{{Name: "b", Content: "b-2"}}, nil)
	s.Plans[forged.Name], s.Plans[repeats.Name] = forged, repeats
	pa.Spec.CompiledPlan = forged.Name
	_, err = plancontent.Entries(t.Context(), pa, s)
	g.Expect(err).To(MatchError(ContainSubstring(`entry "a" is not a reference to a CompiledSync`)))
	pa.Spec.CompiledPlan = repeats.Name
	_, err = plancontent.Entries(t.Context(), pa, s)
	g.Expect(err).To(MatchError(ContainSubstring(`entry "b" is also in the plan`)))
	pa.Spec.CompiledPlan = "plan-gone"
	_, err = plancontent.ResolvePlan(t.Context(), fleeetv1.ProxyPlan{pa}, s)
	g.Expect(err).To(MatchError(ContainSubstring(`ProxyAssemblage edge: reading CompiledPlan plan-gone: compiledplans.fleeet.dev "plan-gone" not found`)))
}

// ResolvePlan hands back the plan as it runs downstream: a part naming
// CompiledSyncs becomes a copy holding the syncs they hold, a part naming
// none is the part itself, and the plan as read is left alone for its
// status. A CompiledSync that cannot be read fails the whole plan, naming
// the part.
func TestResolvePlanReplacesEntriesNamingCompiledSyncsAndLeavesThePlanAsRead(t *testing.T) {
	g := NewWithT(t)
	held := map[string]*fleeetv1.CompiledSync{}
	get := plancontent.Objects{Syncs: held}
	whole := sync("v1")
	whole.Name = "b"
	held["b-1234"] = &fleeetv1.CompiledSync{Sync: whole}
	first := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "edge"}}
	first.Spec.Assemblage.Parts = []string{"r1"}
	first.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{{Name: "a"}}
	second := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: fleeetv1.PlanPartName("edge", 1)}}
	second.Spec.Assemblage.PartRevision = "r1"
	second.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{plancontent.Entry(&whole, "b-1234")}
	thin := second.DeepCopy()

	got, err := plancontent.ResolvePlan(t.Context(), fleeetv1.ProxyPlan{first, second}, get)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got[0]).To(BeIdenticalTo(first), "a part naming no CompiledSync is not copied")
	g.Expect(got[1]).NotTo(BeIdenticalTo(second))
	g.Expect(got[1].Spec.Assemblage.Syncs).To(Equal([]fleeetv1.NamedSync{whole}), "the sync whole, no content")
	g.Expect(got[1].Spec.Assemblage.PartRevision).To(Equal("r1"))
	g.Expect(got[1].Name).To(Equal(second.Name))
	g.Expect(second).To(Equal(thin), "the plan as read is left alone")

	delete(held, "b-1234")
	_, err = plancontent.ResolvePlan(t.Context(), fleeetv1.ProxyPlan{first, second}, get)
	g.Expect(err).To(MatchError(ContainSubstring(`ProxyAssemblage edge.p1: reading CompiledSync b-1234 of sync b: compiledsyncs.fleeet.dev "b-1234" not found`)))
}
