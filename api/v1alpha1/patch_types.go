package v1alpha1

// KustomizePatch is a strategic merge or JSON 6902 patch, applied to the
// objects its target selects.
type KustomizePatch struct {
	// Patch is the patch document, YAML or JSON.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32768
	Patch string `json:"patch"`

	// Target selects the objects to patch.
	// +optional
	Target *PatchTarget `json:"target,omitempty"`
}

// PatchTarget selects the objects a patch applies to; every field set must
// match.
type PatchTarget struct {
	// Group of the objects' API, such as apps.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`

	// Version of the objects' API, such as v1.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Version string `json:"version,omitempty"`

	// Kind of the objects, such as Deployment.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind,omitempty"`

	// Name of the objects; a regular expression.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// Namespace of the objects; a regular expression.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Namespace string `json:"namespace,omitempty"`

	// LabelSelector over the objects' labels, such as app=web.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LabelSelector string `json:"labelSelector,omitempty"`

	// AnnotationSelector over the objects' annotations.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	AnnotationSelector string `json:"annotationSelector,omitempty"`
}
