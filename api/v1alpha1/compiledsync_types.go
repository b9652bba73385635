package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// UnreferencedAnnotation on a CompiledSync is when the manager's collector
// first found no plan naming it (RFC 3339). The collector deletes it once
// it has stayed unreferenced for its grace period; the compiler removes
// the mark when a plan is to name it again.
const UnreferencedAnnotation = "fleeet.dev/unreferenced-since"

// CompiledSync is one sync as the manager compiled it from a Module, stored
// once in the Module's namespace and named in every plan that holds it
// (NamedSync.Content), so a version change writes the sync once and each
// plan only a reference to it. It is immutable: a new version or override
// variant of a Module is a new CompiledSync.
//
// Its name is the Module's name and a keyed hash of the sync (see
// internal/plancontent), which nobody can work out without the key, and a
// cluster's identity may get a CompiledSync by name but never list or
// watch them: a cluster reads only the content its own plan names.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=csync;csyncs,categories=fleeet
// +kubebuilder:printcolumn:name="Sync",type=string,JSONPath=`.sync.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CompiledSync struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Sync is the compiled sync. Its schema is not repeated here, for the
	// reason ProxyAssemblageSpec gives: it was validated where it was
	// written, only the manager may write a CompiledSync, and the cluster's
	// Assemblage validates it again.
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Sync NamedSync `json:"sync"`
}

// CompiledSyncList is a list of CompiledSyncs.
//
// +kubebuilder:object:root=true
type CompiledSyncList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CompiledSync `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CompiledSync{}, &CompiledSyncList{})
}
