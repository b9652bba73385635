package plancontent_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	stored := map[string]*fleeetv1.CompiledSync{
		"app-0123":  {Sync: whole},
		"other-987": {Sync: fleeetv1.NamedSync{Name: "other"}},
	}
	get := func(_ context.Context, name string) (*fleeetv1.CompiledSync, error) {
		if cs, ok := stored[name]; ok {
			return cs, nil
		}
		return nil, errors.New("not found")
	}
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
	c := &plancontent.Cache{Get: func(_ context.Context, name string) (*fleeetv1.CompiledSync, error) {
		reads++
		return &fleeetv1.CompiledSync{Sync: fleeetv1.NamedSync{Name: name}}, nil
	}}
	get := c.Getter()
	for range 3 {
		_, err := get(t.Context(), "a")
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(reads).To(Equal(1))
	c.Keep([]fleeetv1.NamedSync{{Name: "b", Content: "b"}})
	_, err := get(t.Context(), "a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reads).To(Equal(2))
}

// ResolvePlan hands back the plan as it runs downstream: a part naming
// CompiledSyncs becomes a copy holding the syncs they hold, a part naming
// none is the part itself, and the plan as read is left alone for its
// status. A CompiledSync that cannot be read fails the whole plan, naming
// the part.
func TestResolvePlanReplacesEntriesNamingCompiledSyncsAndLeavesThePlanAsRead(t *testing.T) {
	g := NewWithT(t)
	held := map[string]*fleeetv1.CompiledSync{}
	get := func(_ context.Context, name string) (*fleeetv1.CompiledSync, error) {
		if cs, ok := held[name]; ok {
			return cs, nil
		}
		return nil, apierrors.NewNotFound(fleeetv1.GroupVersion.WithResource("compiledsyncs").GroupResource(), name)
	}
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
