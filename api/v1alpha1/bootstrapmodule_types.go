package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// BootstrapModuleSpec places a sync directly on push-mode Remotes: the manager
// creates the Flux objects in the management cluster with
// spec.kubeConfig.secretRef pointing at each Remote's kubeconfig. It is how
// Flux and the fleet agent itself reach a cluster that cannot pull yet.
//
// The management cluster applies a BootstrapModule with plain Flux and no
// agent, so two sync fields a Module takes are refused here rather than
// ignored: sync.bindings (nothing reads the downstream cluster before an agent
// runs there; bind values with controlPlaneBindings) and sync.dependsOn (the
// waiting is the agent's; order bootstrap steps by their own readiness).
//
// +kubebuilder:validation:XValidation:rule="!has(self.sync.bindings) || size(self.sync.bindings) == 0",message="sync.bindings: a BootstrapModule is applied from the management cluster, which cannot read the downstream cluster's objects; use controlPlaneBindings"
// +kubebuilder:validation:XValidation:rule="!has(self.sync.dependsOn) || size(self.sync.dependsOn) == 0",message="sync.dependsOn: a BootstrapModule is applied by Flux from the management cluster without the agent that waits on dependencies; remove it"
// +kubebuilder:validation:XValidation:rule="!has(self.sync.secrets) || size(self.sync.secrets) == 0",message="sync.secrets: a BootstrapModule is applied by Flux in the management cluster, where its Secrets already are; name them in source.secretRef directly"
// +kubebuilder:validation:XValidation:rule="!has(self.sync.package.helm) || !has(self.sync.package.helm.valuesFrom) || size(self.sync.package.helm.valuesFrom) == 0",message="sync.package.helm.valuesFrom: a BootstrapModule is applied by Flux in the management cluster, where it would read the tenant namespace's Secrets with Flux's own rights; use values"
// +kubebuilder:validation:XValidation:rule="!has(self.sync.package.kustomize) || !has(self.sync.package.kustomize.substituteFrom) || size(self.sync.package.kustomize.substituteFrom) == 0",message="sync.package.kustomize.substituteFrom: a BootstrapModule is applied by Flux in the management cluster, where it would read the tenant namespace's Secrets with Flux's own rights; use substitute"
type BootstrapModuleSpec struct {
	SyncPlacement `json:",inline"`
}

// BootstrapModuleStatus is the observed state of a BootstrapModule.
type BootstrapModuleStatus struct {
	// ObservedGeneration is the spec generation the status describes; -1
	// until the first reconcile.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`

	// Conditions: Ready, Reconciling, Stalled, RemotesReachable.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Version is the git tag, commit or chart version applied.
	// +optional
	Version string `json:"version,omitempty"`

	// Summary counts the selected push Remotes by the state of the sync.
	// +optional
	Summary ModuleSummary `json:"summary,omitempty"`

	// Unreachable counts the selected pull Remotes, which the BootstrapModule
	// does not apply to: the management cluster cannot reach them. They are
	// not in summary; the RemotesReachable condition names them.
	// +optional
	Unreachable int32 `json:"unreachable,omitempty"`
}

// BootstrapModule is an exactly-versioned Flux sync applied from the
// management cluster straight into push-mode Remotes.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bmod;bmods,categories=fleeet
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.summary.ready`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.summary.total`
// +kubebuilder:printcolumn:name="Unreachable",type=integer,JSONPath=`.status.unreachable`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BootstrapModule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec BootstrapModuleSpec `json:"spec,omitempty"`

	// Status is the observed state.
	// +kubebuilder:default={"observedGeneration":-1}
	Status BootstrapModuleStatus `json:"status,omitempty"`
}

// BootstrapModuleList is a list of BootstrapModules.
//
// +kubebuilder:object:root=true
type BootstrapModuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BootstrapModule `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BootstrapModule{}, &BootstrapModuleList{})
}
