package mirror_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/mirror"
)

func plan(generation int64) *fleeetv1.ProxyAssemblage {
	pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-1", Name: "plan", Generation: generation}}
	pa.Spec.Assemblage = fleeetv1.AssemblageSpec{
		Syncs:              []fleeetv1.NamedSync{{Name: "app", Labels: map[string]string{"tier": "web"}}, {Name: "db"}},
		ServiceAccountName: "chosen-upstream",
		RetryRequestedAt:   "r1",
	}
	return pa
}

func TestSpecCopiesThePlanStampedWithItsGenerationAndSharesNothingWithIt(t *testing.T) {
	g := NewWithT(t)
	pa := plan(7)
	asm := &fleeetv1.Assemblage{}

	g.Expect(mirror.Spec(asm, pa, "")).To(BeTrue())
	g.Expect(asm.Annotations).To(HaveKeyWithValue(fleeetv1.ProxyGenerationAnnotation, "7"))
	g.Expect(asm.Spec).To(Equal(pa.Spec.Assemblage))

	asm.Spec.Syncs[0].Name = "edited"
	asm.Spec.Syncs[0].Labels["tier"] = "edited"
	g.Expect(pa.Spec.Assemblage.Syncs[0].Name).To(Equal("app"), "the Assemblage holds a deep copy of the plan")
	g.Expect(pa.Spec.Assemblage.Syncs[0].Labels).To(HaveKeyWithValue("tier", "web"), "the Assemblage holds a deep copy of the plan")
}

// The management cluster never picks whom Flux impersonates downstream:
// the downstream cluster's choice wins whenever it made one.
func TestSpecLetsTheDownstreamServiceAccountReplaceThePlans(t *testing.T) {
	for name, tc := range map[string]struct {
		serviceAccount, want string
	}{
		"downstream chose one":  {serviceAccount: "tenant-applier", want: "tenant-applier"},
		"downstream chose none": {serviceAccount: "", want: "chosen-upstream"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			pa := plan(1)
			asm := &fleeetv1.Assemblage{}
			g.Expect(mirror.Spec(asm, pa, tc.serviceAccount)).To(BeTrue())
			g.Expect(asm.Spec.ServiceAccountName).To(Equal(tc.want))
			g.Expect(pa.Spec.Assemblage.ServiceAccountName).To(Equal("chosen-upstream"), "the plan itself is left alone")
			g.Expect(mirror.Spec(asm, pa, tc.serviceAccount)).To(BeFalse(), "the replaced account is no change on the next pass")
		})
	}
}

// Spec writes, and reports a change, exactly when the Assemblage does not
// already hold the plan of pa's current generation.
func TestSpecWritesOnlyWhenThePlanOrItsGenerationDiffers(t *testing.T) {
	for name, tc := range map[string]struct {
		edit        func(asm *fleeetv1.Assemblage)
		wantChanged bool
	}{
		"same plan, same generation": {edit: func(*fleeetv1.Assemblage) {}},
		"plan edited downstream": {
			edit:        func(asm *fleeetv1.Assemblage) { asm.Spec.Syncs = asm.Spec.Syncs[:1] },
			wantChanged: true,
		},
		"plan of an older generation": {
			edit:        func(asm *fleeetv1.Assemblage) { asm.Annotations[fleeetv1.ProxyGenerationAnnotation] = "6" },
			wantChanged: true,
		},
		"generation stamp lost": {
			edit:        func(asm *fleeetv1.Assemblage) { delete(asm.Annotations, fleeetv1.ProxyGenerationAnnotation) },
			wantChanged: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			pa := plan(7)
			asm := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{fleeetv1.UpstreamAnnotation: "flux-system/mgmt"}}}
			g.Expect(mirror.Spec(asm, pa, "")).To(BeTrue())
			tc.edit(asm)

			g.Expect(mirror.Spec(asm, pa, "")).To(Equal(tc.wantChanged))
			g.Expect(asm.Spec).To(Equal(pa.Spec.Assemblage))
			g.Expect(asm.Annotations).To(Equal(map[string]string{
				fleeetv1.ProxyGenerationAnnotation: "7",
				fleeetv1.UpstreamAnnotation:        "flux-system/mgmt",
			}), "other annotations are kept")
		})
	}
}

// observed returns an Assemblage at generation 3 that has observed it and
// holds the plan of ProxyAssemblage generation 9.
func observed() *fleeetv1.Assemblage {
	asm := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{
		Generation:  3,
		Annotations: map[string]string{fleeetv1.ProxyGenerationAnnotation: "9"},
	}}
	asm.Status = fleeetv1.AssemblageStatus{
		ObservedGeneration: 3,
		Conditions: []metav1.Condition{
			{Type: fleeetv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Succeeded", ObservedGeneration: 3},
			{Type: fleeetv1.ReconcilingCondition, Status: metav1.ConditionFalse, Reason: "Succeeded", ObservedGeneration: 2},
		},
		Syncs:   []fleeetv1.SyncStatus{{Name: "app", State: fleeetv1.SyncReady, Revision: "v1"}},
		Summary: fleeetv1.SyncSummary{Total: 1, Ready: 1},
	}
	return asm
}

func TestAMirrorReportsOnlyAnAssemblageThatObservedItsGeneration(t *testing.T) {
	for name, tc := range map[string]struct {
		edit   func(asm *fleeetv1.Assemblage)
		wantOK bool
	}{
		"observed the current plan":      {edit: func(*fleeetv1.Assemblage) {}, wantOK: true},
		"not yet observed its own spec":  {edit: func(asm *fleeetv1.Assemblage) { asm.Status.ObservedGeneration = 2 }},
		"never reconciled":               {edit: func(asm *fleeetv1.Assemblage) { asm.Status.ObservedGeneration = -1 }},
		"holds an older plan":            {edit: func(asm *fleeetv1.Assemblage) { asm.Annotations[fleeetv1.ProxyGenerationAnnotation] = "8" }},
		"holds a plan of no known stamp": {edit: func(asm *fleeetv1.Assemblage) { asm.Annotations = nil }},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			pa := plan(9)
			pa.Status = fleeetv1.AssemblageStatus{ObservedGeneration: 8, Summary: fleeetv1.SyncSummary{Total: 5}}
			asm := observed()
			tc.edit(asm)

			st, ok := mirror.Status(pa, asm)
			g.Expect(ok).To(Equal(tc.wantOK))
			if !ok {
				g.Expect(st).To(Equal(pa.Status), "the ProxyAssemblage keeps the status it had")
				return
			}
			g.Expect(st.Syncs).To(Equal(asm.Status.Syncs))
			g.Expect(st.Summary).To(Equal(asm.Status.Summary))
		})
	}
}

// The reported status describes the ProxyAssemblage's generation, not the
// downstream Assemblage's, and the Assemblage's own status is left alone.
func TestStatusIsStampedWithTheProxyAssemblagesGeneration(t *testing.T) {
	g := NewWithT(t)
	pa := plan(9)
	asm := observed()

	st, ok := mirror.Status(pa, asm)
	g.Expect(ok).To(BeTrue())
	g.Expect(st.ObservedGeneration).To(BeEquivalentTo(9))
	g.Expect(st.Conditions).To(HaveLen(2))
	for _, c := range st.Conditions {
		g.Expect(c.ObservedGeneration).To(BeEquivalentTo(9), c.Type)
	}
	g.Expect(asm.Status).To(Equal(observed().Status), "the Assemblage's status is not rewritten")
}
