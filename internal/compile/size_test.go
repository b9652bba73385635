package compile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/policy"
)

func TestPlaceLeavesOutWhatDoesNotFitNewestFirstAndNeverTakesAwayWhatARemoteHolds(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2026, 1, d, 0, 0, 0, 0, time.UTC) }
	// Empty 20, then 10 for the syncs list: n syncs of sum bytes make
	// 30 + sum + n.
	shape := compile.PlanShape{Empty: 20, Array: 10}
	oneObject := compile.Layout{Single: shape, Parts: []compile.PlanShape{shape}}
	cases := []struct {
		name    string
		limit   int
		kept    []compile.Change
		changes []compile.Change
		want    map[string]int
	}{
		{"everything fits", 1000, kept(100), []compile.Change{{Name: "a", Created: day(1), Next: 100}}, map[string]int{}},
		{"a lone oversized Module is left out, the newer one still goes in", 300,
			kept(50),
			[]compile.Change{{Name: "big", Created: day(1), Next: 400}, {Name: "small", Created: day(2), Next: 50}},
			map[string]int{"big": 30 + 50 + 400 + 2}},
		{"when both cannot fit, the newer is left out", 200, nil,
			[]compile.Change{{Name: "new", Created: day(2), Next: 100}, {Name: "old", Created: day(1), Next: 100}},
			map[string]int{"new": 30 + 200 + 2}},
		{"same creation time: the later name counts as newer", 200, nil,
			[]compile.Change{{Name: "b", Created: day(1), Next: 100}, {Name: "a", Created: day(1), Next: 100}},
			map[string]int{"b": 30 + 200 + 2}},
		{"a growing change keeps what the Remote held", 200, nil,
			[]compile.Change{{Name: "grows", Created: day(1), Held: 100, Next: 300}},
			map[string]int{"grows": 30 + 300 + 1}},
		{"a shrinking change goes in first and makes room for an older growth", 250, nil,
			[]compile.Change{{Name: "old", Created: day(1), Held: 50, Next: 120}, {Name: "new", Created: day(2), Held: 150, Next: 50}},
			map[string]int{}},
		{"over the limit already: nothing growing goes in, nothing held goes away, shrinking goes on", 100, kept(200),
			[]compile.Change{{Name: "grows", Created: day(1), Held: 10, Next: 20}, {Name: "shrinks", Created: day(2), Held: 20, Next: 10}, {Name: "new", Created: day(3), Next: 1}},
			map[string]int{"grows": 30 + 200 + 10 + 20 + 3, "new": 30 + 200 + 10 + 10 + 1 + 4}},
		{"exactly at the limit fits", 30 + 100 + 1, nil, []compile.Change{{Name: "a", Created: day(1), Next: 100}}, map[string]int{}},
		{"one byte over does not", 30 + 100, nil, []compile.Change{{Name: "a", Created: day(1), Next: 100}}, map[string]int{"a": 131}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bytes := map[string]int{}
			for name, over := range compile.Place(oneObject, tc.limit, math.MaxInt, tc.kept, tc.changes).LeftOut {
				bytes[name] = over.Bytes
			}
			NewWithT(t).Expect(bytes).To(Equal(tc.want))
		})
	}
}

// A plan holds at most so many syncs, whatever their size: a Module that
// would add one more is left out, newest first; one changing a sync the
// Remote holds, or removing one, still goes through.
func TestPlaceBoundsTheNumberOfSyncs(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2026, 1, d, 0, 0, 0, 0, time.UTC) }
	shape := compile.PlanShape{Empty: 20, Array: 10}
	oneObject := compile.Layout{Single: shape, Parts: []compile.PlanShape{shape}}
	cases := []struct {
		name    string
		kept    []compile.Change
		changes []compile.Change
		want    map[string]compile.Overflow
	}{
		{"up to the bound fits", kept(10),
			[]compile.Change{{Name: "a", Created: day(1), Next: 10}, {Name: "b", Created: day(2), Next: 10}},
			map[string]compile.Overflow{}},
		{"the newest addition past the bound is left out", kept(10, 10),
			[]compile.Change{{Name: "new", Created: day(2), Next: 10}, {Name: "old", Created: day(1), Next: 10}},
			map[string]compile.Overflow{"new": {Bytes: 30 + 40 + 4, Syncs: 4, Alone: 30 + 10 + 1}}},
		{"a removal makes room first", kept(10, 10),
			[]compile.Change{{Name: "added", Created: day(1), Next: 10}, {Name: "removed", Created: day(2), Held: 10}},
			map[string]compile.Overflow{}},
		{"past the bound already, a sync the Remote holds still grows", kept(10, 10, 10),
			[]compile.Change{{Name: "grows", Created: day(1), Held: 10, Next: 500}},
			map[string]compile.Overflow{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(compile.Place(oneObject, math.MaxInt, 3, tc.kept, tc.changes).LeftOut).To(Equal(tc.want))
		})
	}
}

// The compiler and the admission policy policies/size must never disagree
// on a plan's size: one the compiler takes for fitting and the policy
// refuses would stop the whole plan again. Numbers in helm values (which
// the policy sees as float64), escaped and non-ASCII characters are where
// a plain len(json.Marshal) goes wrong.
func TestPlanBytesIsWhatTheSizePolicyMeasures(t *testing.T) {
	g := NewWithT(t)
	engine, err := policy.New(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	values := `{"replicas":1234567,"ratio":0.000012,"big":1e5,"huge":12345678901234567890,"neg":-3.50,` +
		`"html":"<a href=\"x\">&amp;</a>","text":"grüße €","list":[1,2.0,3e21]}`
	sync := fleeetv1.NamedSync{Name: "app", Labels: map[string]string{"tier": "web"}, SyncSpec: fleeetv1.SyncSpec{
		Source: fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "app", Version: "1.2.3"}},
		Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{ReleaseName: "app",
			Values: &apiextensionsv1.JSON{Raw: []byte(values)}}},
	}}
	spec := fleeetv1.ProxyAssemblageSpec{Assemblage: fleeetv1.AssemblageSpec{
		RetryRequestedAt: "2030-01-01T00:00:00Z", Syncs: []fleeetv1.NamedSync{sync, *named("other", "v1.0.0")}}}
	size := compile.PlanBytes(&spec)
	raw, err := json.Marshal(spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(size).NotTo(Equal(len(raw)), "the fixture must tell the two measures apart")

	refused := func(limit int) bool {
		var object any
		g.Expect(json.Unmarshal(fmt.Appendf(nil, `{"spec":%s}`, raw), &object)).To(Succeed())
		d, err := engine.Evaluate(context.Background(), map[string]any{
			"request": map[string]any{"kind": map[string]any{"group": "fleeet.dev", "version": "v1alpha1", "kind": "ProxyAssemblage"},
				"operation": "UPDATE", "subResource": "", "namespace": ns, "name": "edge-1", "userInfo": map[string]any{"username": "manager"}},
			"namespace": map[string]any{"name": ns, "labels": map[string]any{fleeetv1.TenantLabel: "true"}},
			"context":   map[string]any{"manager": map[string]any{"username": "manager"}, "limits": map[string]any{"maxPlanBytes": limit}},
			"object":    object,
		})
		g.Expect(err).NotTo(HaveOccurred())
		for _, v := range d.Deny {
			if v.Policy == "size" {
				g.Expect(v.Message).To(ContainSubstring(fmt.Sprintf("is %d bytes", size)))
				return true
			}
		}
		return false
	}
	g.Expect(refused(size)).To(BeFalse(), "a plan of exactly the limit is admitted")
	g.Expect(refused(size-1)).To(BeTrue(), "a plan one byte over the limit is refused")
}

// A Module too large for a Remote's plan is left out of it, stamped with
// why, while the other Modules' changes go through; a Module that depends
// on it stays in (the agent blocks it, naming the dependency).
func TestPlanLeavesOutTheModuleThatDoesNotFitAndDeliversTheRest(t *testing.T) {
	g := NewWithT(t)
	older := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	newer := metav1.NewTime(older.Add(time.Hour))
	small := module("small", "v2.0.0", nil)
	small.CreationTimestamp, small.Spec.Selector = newer, &metav1.LabelSelector{}
	small.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Name: "big"}}
	big := module("big", "v1.0.0", nil)
	big.CreationTimestamp, big.Spec.Selector = older, &metav1.LabelSelector{}
	big.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"filler": strings.Repeat("x", 3000)}
	current := compile.Parts{{*named("small", "v1.0.0")}}

	parts, stamps, err := compile.Plan(t.Context(), configMaps(nil), []fleeetv1.Module{*small, *big}, edge("edge-1", nil), current,
		compile.Limit{MaxBytes: 2048, MaxParts: fleeetv1.MaxPlanParts}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parts).To(HaveLen(1))
	syncs := parts[0]
	g.Expect(syncs).To(HaveLen(1))
	g.Expect(syncs[0].Name).To(Equal("small"))
	g.Expect(syncs[0].Source.Git.Tag).To(Equal("v2.0.0"))
	g.Expect(stamps["small"].TooLarge).To(BeEmpty())
	g.Expect(stamps["big"].Pending).To(BeTrue())
	g.Expect(stamps["big"].TooLarge).To(MatchRegexp(`^left out of the plan of Remote edge-1: its sync alone makes a part of \d+ bytes, over the 2048-byte limit \(--max-plan-bytes\)$`))
	g.Expect(compile.PlanBytes(&fleeetv1.ProxyAssemblageSpec{Assemblage: fleeetv1.AssemblageSpec{Syncs: syncs}})).To(BeNumerically("<=", 2048))

	// Without a limit, both go in.
	parts, stamps, err = compile.Plan(t.Context(), configMaps(nil), []fleeetv1.Module{*small, *big}, edge("edge-1", nil), current, compile.Limit{}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parts).To(HaveLen(1))
	g.Expect(parts[0]).To(HaveLen(2))
	g.Expect(stamps["big"].TooLarge).To(BeEmpty())
}

// A Remote selected by more Modules than an Assemblage holds gets the
// oldest ones; the newest is left out, stamped with the count, instead of
// a plan the cluster could not mirror at all.
func TestPlanLeavesOutTheModulePastTheSyncCount(t *testing.T) {
	g := NewWithT(t)
	var modules []fleeetv1.Module
	for i := range 3 {
		m := module(fmt.Sprintf("app-%d", i), "v1.0.0", nil)
		m.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1+i, 0, 0, 0, 0, time.UTC))
		m.Spec.Selector = &metav1.LabelSelector{}
		modules = append(modules, *m)
	}
	parts, stamps, err := compile.Plan(t.Context(), configMaps(nil), modules, edge("edge-1", nil), nil,
		compile.Limit{MaxBytes: compile.DefaultMaxPlanBytes, MaxSyncs: 2}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parts).To(HaveLen(1))
	syncs := parts[0]
	g.Expect(syncs).To(HaveLen(2))
	g.Expect(compile.Find(syncs, "app-2")).To(BeNil())
	g.Expect(stamps["app-2"].Pending).To(BeTrue())
	g.Expect(stamps["app-2"].TooLarge).To(Equal("left out of the plan of Remote edge-1: with it the plan would hold 3 syncs, over the 2 its 1 part(s) of 2 syncs hold (as many as a cluster's Assemblage holds)"))
	g.Expect(stamps["app-0"].TooLarge).To(BeEmpty())
}

// Previews split a plan as the manager does: a Remote selected by one
// Module more than an Assemblage holds is previewed whole, over two parts.
func TestEventualSplitsAPlanOverPartsAsTheManagerDoes(t *testing.T) {
	g := NewWithT(t)
	modules := make([]fleeetv1.Module, fleeetv1.MaxSyncs+1)
	for i := range modules {
		m := module(fmt.Sprintf("app-%04d", i), "v1.0.0", nil)
		m.Spec.Selector = &metav1.LabelSelector{}
		modules[i] = *m
	}
	parts, stamps, err := compile.Eventual(t.Context(), configMaps(nil), modules, edge("edge-1", nil), nil, compile.DefaultMaxPlanBytes)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parts).To(HaveLen(2))
	g.Expect(parts[0]).To(HaveLen(fleeetv1.MaxSyncs))
	g.Expect(parts.Union()).To(HaveLen(fleeetv1.MaxSyncs + 1))
	for name, stamp := range stamps {
		g.Expect(stamp.TooLarge).To(BeEmpty(), name)
	}
}

// kept are syncs that do not change, of the sizes given, all in part 0.
func kept(sizes ...int) []compile.Change {
	var out []compile.Change
	for i, size := range sizes {
		out = append(out, compile.Change{Name: fmt.Sprintf("kept-%d", i), Held: size, Next: size})
	}
	return out
}
