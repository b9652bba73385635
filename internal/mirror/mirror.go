// Package mirror copies a ProxyAssemblage's plan into a downstream
// Assemblage and the Assemblage's status back, and a plan split over
// several ProxyAssemblages, whole, into as many Assemblages, the same way
// whether the manager pushes the plan or the agent pulls it. Plan entries
// naming a CompiledSync are resolved before they are mirrored
// (plancontent.ResolvePlan): downstream, every sync is whole.
package mirror

import (
	"strconv"

	"k8s.io/apimachinery/pkg/api/equality"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Spec copies pa's plan into asm and reports whether asm changed. A
// non-empty serviceAccount, chosen by the downstream cluster, replaces the
// plan's: the management cluster never picks whom Flux impersonates there.
func Spec(asm *fleeetv1.Assemblage, pa *fleeetv1.ProxyAssemblage, serviceAccount string) bool {
	gen := strconv.FormatInt(pa.Generation, 10)
	// A shallow copy to compare with; the plan is deep-copied only when it
	// is written.
	want := pa.Spec.Assemblage
	if serviceAccount != "" {
		want.ServiceAccountName = serviceAccount
	}
	if asm.Annotations[fleeetv1.ProxyGenerationAnnotation] == gen && equality.Semantic.DeepEqual(asm.Spec, want) {
		return false
	}
	if asm.Annotations == nil {
		asm.Annotations = map[string]string{}
	}
	asm.Annotations[fleeetv1.ProxyGenerationAnnotation] = gen
	asm.Spec = *want.DeepCopy()
	return true
}

// Status returns the status pa should carry given asm's, and false while
// asm has not yet observed the plan copied from pa's current generation.
func Status(pa *fleeetv1.ProxyAssemblage, asm *fleeetv1.Assemblage) (fleeetv1.AssemblageStatus, bool) {
	if asm.Status.ObservedGeneration != asm.Generation ||
		asm.Annotations[fleeetv1.ProxyGenerationAnnotation] != strconv.FormatInt(pa.Generation, 10) {
		return pa.Status, false
	}
	st := *asm.Status.DeepCopy()
	st.ObservedGeneration = pa.Generation
	for i := range st.Conditions {
		st.Conditions[i].ObservedGeneration = pa.Generation
	}
	return st, true
}
