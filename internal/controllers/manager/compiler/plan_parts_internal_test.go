package compiler

import (
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
)

// A plan in one part is the one object it always was: no parts, no
// revision, every stamp.
func TestAPlanInOnePartIsTheObjectItAlwaysWas(t *testing.T) {
	g := NewWithT(t)
	syncs := []fleeetv1.NamedSync{{Name: "a"}, {Name: "b"}}
	stamps := map[string]fleeetv1.Compiled{"a": {Generation: 1}, "b": {Generation: 2}, "left-out": {TooLarge: "too large"}}
	p, err := planOf(compile.Parts{syncs}, stamps, "retry-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.parts).To(Equal([]fleeetv1.AssemblageSpec{{Syncs: syncs, RetryRequestedAt: "retry-1"}}))
	want, err := json.Marshal(stamps)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.compiled).To(Equal([]string{string(want)}))

	p, err = planOf(nil, map[string]fleeetv1.Compiled{}, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.parts).To(Equal([]fleeetv1.AssemblageSpec{{}}), "no Modules: one empty object")
	g.Expect(p.compiled).To(Equal([]string{"{}"}))
}

// Each part stamps the syncs it holds, part 0 also the Modules whose sync
// is in no part, and part 0 lists each further part's revision.
func TestEachPartStampsItsSyncsAndPartZeroListsTheOthers(t *testing.T) {
	g := NewWithT(t)
	parts := compile.Parts{{{Name: "a"}}, {{Name: "b"}, {Name: "c"}}, {{Name: "d"}}}
	stamps := map[string]fleeetv1.Compiled{"a": {Generation: 1}, "b": {Generation: 2}, "c": {Generation: 3}, "d": {Generation: 4},
		"left-out": {TooLarge: "too large"}}
	p, err := planOf(parts, stamps, "retry-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.parts).To(HaveLen(3))
	revisions := []string{compile.PartRevision(parts[1], "retry-1"), compile.PartRevision(parts[2], "retry-1")}
	g.Expect(p.parts[0]).To(Equal(fleeetv1.AssemblageSpec{Syncs: parts[0], RetryRequestedAt: "retry-1", Parts: revisions}))
	for k := 1; k < 3; k++ {
		g.Expect(p.parts[k]).To(Equal(fleeetv1.AssemblageSpec{Syncs: parts[k], RetryRequestedAt: "retry-1", PartRevision: revisions[k-1]}))
	}
	stampsOf := func(k int) map[string]fleeetv1.Compiled {
		var got map[string]fleeetv1.Compiled
		g.Expect(json.Unmarshal([]byte(p.compiled[k]), &got)).To(Succeed())
		return got
	}
	g.Expect(stampsOf(0)).To(Equal(map[string]fleeetv1.Compiled{"a": {Generation: 1}, "left-out": {TooLarge: "too large"}}))
	g.Expect(stampsOf(1)).To(Equal(map[string]fleeetv1.Compiled{"b": {Generation: 2}, "c": {Generation: 3}}))
	g.Expect(stampsOf(2)).To(Equal(map[string]fleeetv1.Compiled{"d": {Generation: 4}}))
	g.Expect(revisions[0]).NotTo(Equal(compile.PartRevision(parts[1], "retry-2")), "a new retry token is a new revision")
	g.Expect(revisions[0]).To(HaveLen(16))
}
