package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Assemblage is a downstream cluster's local copy of its ProxyAssemblage. The
// agent expands each sync into Flux objects, gates them on their dependencies'
// readiness and reports per-sync status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=asm;asms,categories=fleeet
// +kubebuilder:printcolumn:name="Syncs",type=integer,JSONPath=`.status.summary.total`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.summary.ready`
// +kubebuilder:printcolumn:name="Blocked",type=integer,JSONPath=`.status.summary.blocked`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.summary.failed`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Assemblage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the plan for this cluster.
	Spec AssemblageSpec `json:"spec,omitempty"`

	// Status is the observed state of each sync.
	// +kubebuilder:default={"observedGeneration":-1}
	Status AssemblageStatus `json:"status,omitempty"`
}

// AssemblageList is a list of Assemblages.
//
// +kubebuilder:object:root=true
type AssemblageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Assemblage `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Assemblage{}, &AssemblageList{})
}
