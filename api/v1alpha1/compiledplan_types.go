package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// CompiledPlanAnnotation on a ProxyAssemblage names the CompiledPlan
// holding the compiler's stamps of that plan part, in place of
// CompiledAnnotation. It is an annotation, not spec, for the reason
// CompiledAnnotation is: a new Module generation that compiles to the same
// entries changes the stamps alone, and leaves the plan's generation, and
// the cluster's report of it, as they are.
const CompiledPlanAnnotation = "fleeet.dev/compiled-plan"

// CompiledPlan is what plan parts of several Remotes have in common, stored
// once in the namespace and named by each of those parts: the entries that
// name a CompiledSync and deliver no Secret, and the compiler's stamps. A
// part names the CompiledPlan holding those entries alone in
// ProxyAssemblageSpec.CompiledPlan, and the one holding them with its
// stamps in CompiledPlanAnnotation. What is truly one
// Remote's stays in its plan: syncs compiled for it alone (control-plane
// bindings) and the entries of syncs delivering Secrets, which the
// manager's delivery reads from the plan. So a version change rolled to
// every Remote writes two CompiledPlans and a small plan per Remote, not
// every Remote's entries and stamps.
//
// It is immutable, and its name is a hash of what it holds: the entries
// name CompiledSyncs, whose names nobody can work out without their
// Module's UID, so nobody can work out the name of a CompiledPlan either
// without knowing every CompiledSync it names. A cluster's identity may get
// a CompiledPlan by name, never list or watch them.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=cplan;cplans,categories=fleeet
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CompiledPlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the plan parts naming it share. Its schema is not
	// repeated here, for the reason ProxyAssemblageSpec gives.
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Spec CompiledPlanSpec `json:"spec"`
}

// CompiledPlanSpec is what a CompiledPlan holds.
type CompiledPlanSpec struct {
	// Entries are plan entries, sorted by name, each naming a CompiledSync
	// (NamedSync.Content) and nothing else.
	// +optional
	Entries []NamedSync `json:"entries,omitempty"`

	// Compiled are the compiler's stamps, sync name → Compiled, as
	// CompiledAnnotation holds them.
	// +optional
	Compiled map[string]Compiled `json:"compiled,omitempty"`
}

// CompiledPlanList is a list of CompiledPlans.
//
// +kubebuilder:object:root=true
type CompiledPlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CompiledPlan `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CompiledPlan{}, &CompiledPlanList{})
}
