package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ModuleSpec says which exactly-versioned sync runs on which Remotes and how
// a new version rolls out to them.
type ModuleSpec struct {
	SyncPlacement `json:",inline"`

	// Rollout says how a new version of the sync reaches the selected Remotes.
	// +optional
	// +kubebuilder:default={}
	Rollout Rollout `json:"rollout,omitempty"`
}

// SyncPlacement is what Module and BootstrapModule share: a sync, the Remotes
// it is placed on, and the values bound into it for each of them.
type SyncPlacement struct {
	// Sync is applied to every selected Remote, named after its Module.
	// +required
	Sync SyncSpec `json:"sync"`

	// Selector selects Remotes in the Module's namespace by label. Absent
	// selects none; {} selects all.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// ControlPlaneBindings are resolved in the management cluster for each
	// target Remote before the sync is compiled.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	ControlPlaneBindings []ControlPlaneBinding `json:"controlPlaneBindings,omitempty"`

	// Suspend stops reconciling; what was applied stays as it is.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ControlPlaneBinding is a named value resolved in the management cluster: a
// literal, or a field of the target Remote or of a ConfigMap in the tenant
// namespace. Secrets are refused: secret material never enters a
// ProxyAssemblage; bind Secrets downstream with sync.bindings.
//
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.objectFieldRef)",message="exactly one of value or objectFieldRef must be set"
type ControlPlaneBinding struct {
	// Name is what $(NAME) mentions.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`

	// Value is a literal.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Value *string `json:"value,omitempty"`

	// ObjectFieldRef reads the value from the target Remote (its labels,
	// annotations, spec or status) or from a ConfigMap in the tenant namespace.
	// +optional
	ObjectFieldRef *ControlPlaneFieldRef `json:"objectFieldRef,omitempty"`
}

// ControlPlaneFieldRef selects one field of the target Remote or of a
// ConfigMap in the Module's namespace by JSON pointer.
//
// +kubebuilder:validation:XValidation:rule="self.kind != 'ConfigMap' || has(self.name)",message="a ConfigMap reference needs a name"
type ControlPlaneFieldRef struct {
	// Kind is Remote (the Remote being compiled for) or ConfigMap.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == 'Remote' || self == 'ConfigMap'",message="must be Remote or ConfigMap; Secrets are never read in the management cluster, bind them downstream with sync.bindings"
	Kind string `json:"kind"`

	// Name of the ConfigMap; unused for Remote.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// FieldPath is a JSON pointer (RFC 6901), such as /metadata/labels/region
	// or /data/region.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^(/([^~/]|~[01])*)+$`
	FieldPath string `json:"fieldPath"`
}

// RolloutStrategy names how a new version reaches the selected Remotes.
// +kubebuilder:validation:Enum=AllAtOnce;RollingUpdate
type RolloutStrategy string

const (
	// AllAtOnceStrategy moves every selected Remote to a new version at once.
	AllAtOnceStrategy RolloutStrategy = "AllAtOnce"
	// RollingUpdateStrategy moves at most maxUnavailable Remotes at a time.
	RollingUpdateStrategy RolloutStrategy = "RollingUpdate"
)

// Rollout says how a new version of a Module's sync reaches its Remotes.
// Under RollingUpdate a Remote whose sync fails on the new version pauses
// the rollout (condition RolloutPaused) until that Remote is repaired, Ready
// at the new version for minReadySeconds, or the spec changes.
type Rollout struct {
	// Strategy is AllAtOnce or RollingUpdate.
	// +optional
	// +kubebuilder:default=AllAtOnce
	Strategy RolloutStrategy `json:"strategy,omitempty"`

	// MaxUnavailable is how many Remotes (an integer of at least 1, or a
	// percentage of the selected Remotes) may be moving to a new version at
	// once under RollingUpdate.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",message="must be an integer of at least 1 or a percentage from 1% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// MinReadySeconds is how long a Remote's sync must stay Ready at the new
	// version before the Remote counts as updated.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`
}

// ModuleStatus is the observed state of a Module, aggregated from the
// ProxyAssemblages of its Remotes.
type ModuleStatus struct {
	// ObservedGeneration is the spec generation the status describes; -1
	// until the first reconcile.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`

	// Conditions: Ready, Reconciling, Stalled, RolloutPaused.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Version is the git tag, commit or chart version the Module rolls out.
	// +optional
	Version string `json:"version,omitempty"`

	// Summary counts the selected Remotes by the state of this Module's sync.
	// +optional
	Summary ModuleSummary `json:"summary,omitempty"`

	// Rollout is the state of the rollout of the current generation.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`
}

// RolloutStatus records which Remotes may move to the Module's current
// generation. Only the Remotes in flight are listed, so the status stays
// small however many Remotes the Module selects.
type RolloutStatus struct {
	// Generation of the Module being rolled out.
	Generation int64 `json:"generation"`

	// Admitted lists the Remotes allowed to move to this generation that do
	// not hold it yet.
	// +optional
	// +listType=set
	Admitted []string `json:"admitted,omitempty"`

	// PausedBy names the Remote whose failure paused the rollout.
	// +optional
	PausedBy string `json:"pausedBy,omitempty"`
}

// ModuleSummary counts a Module's selected Remotes.
type ModuleSummary struct {
	// Total selected Remotes.
	Total int32 `json:"total"`
	// Updated Remotes hold the current version in their ProxyAssemblage.
	Updated int32 `json:"updated"`
	// Ready Remotes report the sync Ready at the current version.
	Ready int32 `json:"ready"`
	// Failed Remotes report the sync Failed.
	Failed int32 `json:"failed"`
	// Blocked Remotes report the sync Blocked on dependencies.
	Blocked int32 `json:"blocked"`
	// Offline Remotes are not Connected.
	Offline int32 `json:"offline"`
	// Suspended Remotes have spec.suspend set: their plan stays as it is.
	// +optional
	Suspended int32 `json:"suspended,omitempty"`
	// PodsNotReady Remotes hold the current version and report its
	// workloads with fewer pods ready than they want; the Ready condition
	// says how many, and why, for the first of them.
	// +optional
	PodsNotReady int32 `json:"podsNotReady,omitempty"`
}

// Module is one exactly-versioned Flux sync and the Remotes it runs on.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mod;mods,categories=fleeet
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.summary.ready`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.summary.total`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.spec.rollout.strategy`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Module struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec ModuleSpec `json:"spec,omitempty"`

	// Status is the observed state.
	// +kubebuilder:default={"observedGeneration":-1}
	Status ModuleStatus `json:"status,omitempty"`
}

// ModuleList is a list of Modules.
//
// +kubebuilder:object:root=true
type ModuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Module `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Module{}, &ModuleList{})
}
