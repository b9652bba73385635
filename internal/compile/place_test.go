package compile_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
)

// parts is a layout of n parts of the same shape as one object: n syncs
// of sum bytes make 30 + sum + n in any of them.
func parts(n int) compile.Layout {
	shape := compile.PlanShape{Empty: 20, Array: 10}
	layout := compile.Layout{Single: shape}
	for range n {
		layout.Parts = append(layout.Parts, shape)
	}
	return layout
}

// held is a sync the Remote holds in part, of size bytes, unchanged.
func held(name string, part, size int) compile.Change {
	return compile.Change{Name: name, Held: size, Next: size, Part: part}
}

// threePerPart holds three syncs of 100 bytes a part, no more.
const threePerPart = 30 + 3*100 + 3

func TestPlaceKeepsASyncInItsPartAndPutsNewOnesInTheLowestWithRoom(t *testing.T) {
	g := NewWithT(t)
	kept := []compile.Change{held("a", 0, 100), held("b", 1, 100), held("c", 0, 100), held("d", 2, 100)}
	placed := compile.Place(parts(3), threePerPart, math.MaxInt, kept, []compile.Change{
		{Name: "new-1", Created: time.Unix(1, 0), Next: 100},
		{Name: "new-2", Created: time.Unix(2, 0), Next: 100},
		{Name: "new-3", Created: time.Unix(3, 0), Next: 100},
	})
	g.Expect(placed.LeftOut).To(BeEmpty())
	g.Expect(placed.Part).To(Equal(map[string]int{"a": 0, "b": 1, "c": 0, "d": 2, "new-1": 0, "new-2": 1, "new-3": 1}))
}

func TestPlaceMovesAGrownSyncOnlyOnceItsPartOverflows(t *testing.T) {
	g := NewWithT(t)
	kept := []compile.Change{held("a", 0, 100), held("b", 1, 100), held("d", 1, 100)}
	grows := func(to int) []compile.Change { return []compile.Change{{Name: "c", Held: 100, Next: to, Part: 0}} }

	placed := compile.Place(parts(3), threePerPart, math.MaxInt, kept, grows(150))
	g.Expect(placed.Part).To(Equal(map[string]int{"a": 0, "b": 1, "c": 0, "d": 1}), "still fits its part")

	placed = compile.Place(parts(3), threePerPart, math.MaxInt, kept, grows(240))
	g.Expect(placed.LeftOut).To(BeEmpty())
	g.Expect(placed.Part).To(Equal(map[string]int{"a": 0, "b": 1, "c": 2, "d": 1}), "moves to the lowest part with room; the others stay")

	placed = compile.Place(parts(3), threePerPart, math.MaxInt, kept, grows(threePerPart))
	g.Expect(placed.LeftOut).To(HaveKeyWithValue("c", compile.Overflow{Bytes: 30 + 300 + threePerPart + 4, Syncs: 4, Alone: 30 + threePerPart + 1}))
	g.Expect(placed.Part).To(Equal(map[string]int{"a": 0, "b": 1, "c": 0, "d": 1}), "too large for any part: keeps what it held where it was")
}

func TestPlaceDoesNotDependOnTheOrderOfItsInput(t *testing.T) {
	g := NewWithT(t)
	var kept, changes []compile.Change
	for i := range 20 {
		kept = append(kept, held(fmt.Sprintf("kept-%02d", i), i%4, 40+i))
		changes = append(changes, compile.Change{Name: fmt.Sprintf("new-%02d", i), Created: time.Unix(int64(i%3), 0), Next: 50 + 7*i})
	}
	changes = append(changes, compile.Change{Name: "kept-03", Held: 43, Next: 200, Part: 3})
	kept = kept[:19] // kept-03 changes
	kept = append(kept[:3], kept[4:]...)
	want := compile.Place(parts(4), 500, 12, kept, changes)
	g.Expect(want.LeftOut).NotTo(BeEmpty(), "the case must leave some out to be worth comparing")
	for range 10 {
		rand.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
		rand.Shuffle(len(changes), func(i, j int) { changes[i], changes[j] = changes[j], changes[i] })
		g.Expect(compile.Place(parts(4), 500, 12, kept, changes)).To(Equal(want))
	}
}

func TestPlaceFillsAtMostItsPartsAndLeavesOutTheNewest(t *testing.T) {
	g := NewWithT(t)
	var changes []compile.Change
	for i := range 2*fleeetv1.MaxPlanParts + 1 {
		changes = append(changes, compile.Change{Name: fmt.Sprintf("app-%02d", i), Created: time.Unix(int64(i), 0), Next: 10})
	}
	placed := compile.Place(parts(fleeetv1.MaxPlanParts), math.MaxInt, 2, nil, changes)
	newest := fmt.Sprintf("app-%02d", 2*fleeetv1.MaxPlanParts)
	g.Expect(placed.LeftOut).To(Equal(map[string]compile.Overflow{newest: {Bytes: 30 + 170 + 17, Syncs: 17, Alone: 41}}))
	perPart := map[int]int{}
	for _, k := range placed.Part {
		perPart[k]++
	}
	g.Expect(perPart).To(HaveLen(fleeetv1.MaxPlanParts))
	for k, n := range perPart {
		g.Expect(n).To(Equal(2), "part %d", k)
	}
}

func TestPlaceLeavesOutASyncLargerThanAPartAloneAndPlacesTheRest(t *testing.T) {
	g := NewWithT(t)
	placed := compile.Place(parts(8), threePerPart, math.MaxInt, []compile.Change{held("a", 0, 100)}, []compile.Change{
		{Name: "huge", Created: time.Unix(1, 0), Next: threePerPart},
		{Name: "small", Created: time.Unix(2, 0), Next: 100},
	})
	g.Expect(placed.LeftOut).To(HaveKey("huge"))
	g.Expect(placed.LeftOut["huge"].Alone).To(BeNumerically(">", threePerPart))
	g.Expect(placed.Part).To(Equal(map[string]int{"a": 0, "small": 0}))
}

func TestPlacePutsAPlanThatFitsOneObjectInPartZero(t *testing.T) {
	g := NewWithT(t)
	kept := []compile.Change{held("a", 0, 100), held("b", 1, 100), held("c", 2, 100)}
	placed := compile.Place(parts(3), threePerPart, math.MaxInt, kept, []compile.Change{{Name: "d", Held: 100, Part: 1}})
	g.Expect(placed.Part).To(Equal(map[string]int{"a": 0, "b": 0, "c": 0}))
}

// A plan over one object's limit is split over parts, each within the
// limit as admission measures it with the part's own fields; a version
// change of one Module changes only the part holding it.
func TestPlanSplitsOverPartsEachWithinTheLimit(t *testing.T) {
	g := NewWithT(t)
	var modules []fleeetv1.Module
	for i := range 12 {
		m := module(fmt.Sprintf("app-%02d", i), "v1.0.0", nil)
		m.Spec.Selector = &metav1.LabelSelector{}
		modules = append(modules, *m)
	}
	limit := compile.Limit{MaxBytes: 1000, MaxSyncs: fleeetv1.MaxSyncs, MaxParts: fleeetv1.MaxPlanParts, RetryRequestedAt: "retry-1"}
	partsOf := func(current compile.Parts) compile.Parts {
		got, stamps, err := compile.Plan(t.Context(), configMaps(nil), modules, edge("edge-1", nil), current, limit, nil)
		g.Expect(err).NotTo(HaveOccurred())
		for name, stamp := range stamps {
			g.Expect(stamp.TooLarge).To(BeEmpty(), name)
		}
		return got
	}
	first := partsOf(nil)
	g.Expect(len(first)).To(BeNumerically(">=", 3))
	g.Expect(first.Union()).To(HaveLen(12))
	var revisions []string
	for k := len(first) - 1; k >= 1; k-- {
		revisions = append([]string{compile.PartRevision(first[k], limit.RetryRequestedAt)}, revisions...)
		spec := fleeetv1.ProxyAssemblageSpec{Assemblage: fleeetv1.AssemblageSpec{Syncs: first[k],
			RetryRequestedAt: limit.RetryRequestedAt, PartRevision: revisions[0]}}
		g.Expect(compile.PlanBytes(&spec)).To(BeNumerically("<=", limit.MaxBytes), "part %d", k)
	}
	spec := fleeetv1.ProxyAssemblageSpec{Assemblage: fleeetv1.AssemblageSpec{Syncs: first[0],
		RetryRequestedAt: limit.RetryRequestedAt, Parts: revisions}}
	g.Expect(compile.PlanBytes(&spec)).To(BeNumerically("<=", limit.MaxBytes), "part 0")

	last := first[len(first)-1][0].Name
	i := slices.IndexFunc(modules, func(m fleeetv1.Module) bool { return m.Name == last })
	modules[i].Spec.Sync.Source.Git.Tag = "v1.0.1"
	next := partsOf(first)
	g.Expect(next).To(HaveLen(len(first)))
	for k := range first {
		if k == len(first)-1 {
			g.Expect(compile.PartRevision(next[k], "retry-1")).NotTo(Equal(compile.PartRevision(first[k], "retry-1")))
			continue
		}
		g.Expect(next[k]).To(Equal(first[k]), "part %d", k)
	}
}

// ReadPlan reads the plan of one Remote part by part, part 0 first, with a
// nil entry for each part that does not exist, and nothing of another
// Remote's plan.
func TestReadPlanReadsEveryPartAndLeavesTheMissingOnesNil(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(fleeetv1.AddToScheme(scheme)).To(Succeed())
	part := func(plan string, k int) *fleeetv1.ProxyAssemblage {
		return &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fleeetv1.PlanPartName(plan, k)}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(part("edge", 0), part("edge", 2), part("other", 0), part("other", 1)).Build()
	plan, err := compile.ReadPlan(t.Context(), c, client.ObjectKey{Namespace: ns, Name: "edge"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plan).To(HaveLen(fleeetv1.MaxPlanParts))
	for k, pa := range plan {
		if k == 0 || k == 2 {
			g.Expect(pa).NotTo(BeNil(), "part %d", k)
			g.Expect(pa.Name).To(Equal(fleeetv1.PlanPartName("edge", k)))
			continue
		}
		g.Expect(pa).To(BeNil(), "part %d", k)
	}
}
