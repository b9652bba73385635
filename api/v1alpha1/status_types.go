package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// SyncState is the state of one sync in an assemblage.
// +kubebuilder:validation:Enum=Ready;Progressing;Blocked;Failed
type SyncState string

const (
	// SyncReady means the sync's Flux objects are Ready at the desired revision.
	SyncReady SyncState = "Ready"
	// SyncProgressing means the sync was applied and Flux is reconciling it.
	SyncProgressing SyncState = "Progressing"
	// SyncBlocked means the sync waits for dependencies that are not Ready.
	SyncBlocked SyncState = "Blocked"
	// SyncFailed means the sync cannot be applied or Flux reported a failure.
	SyncFailed SyncState = "Failed"
)

// AssemblageSpec is the whole plan for one cluster: every sync it runs.
// It is written whole by one writer (the manager, or the agent mirroring its
// ProxyAssemblage), so the apiserver tracks it as one field: per-field
// tracking of fifty syncs made each write of a plan several times dearer.
//
// +structType=atomic
type AssemblageSpec struct {
	// Syncs to run, each named uniquely.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=512
	Syncs []NamedSync `json:"syncs,omitempty"`

	// ServiceAccountName is the downstream ServiceAccount that Flux
	// impersonates to apply the syncs, so applied content stays within what
	// the tenant may touch.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// RetryRequestedAt is a token, copied from the Remote's
	// fleeet.dev/retry-requested-at annotation. Each new value makes the
	// agent ask Flux to reconcile every sync at once and to reset the
	// failure counts of HelmReleases that gave up (Flux's
	// reconcile.fluxcd.io/requestedAt and resetAt), so syncs that failed
	// are tried again without access to the cluster.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RetryRequestedAt string `json:"retryRequestedAt,omitempty"`
}

// AssemblageStatus is the observed state of an assemblage, written by the
// agent downstream and copied into the ProxyAssemblage upstream.
type AssemblageStatus struct {
	// ObservedGeneration is the spec generation the status describes; -1
	// until the first reconcile.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`

	// Conditions: Ready, Reconciling, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Syncs is the state of each sync in the spec.
	// +optional
	// +listType=map
	// +listMapKey=name
	Syncs []SyncStatus `json:"syncs,omitempty"`

	// Summary counts the syncs by state.
	// +optional
	Summary SyncSummary `json:"summary,omitempty"`
}

// SyncStatus is the observed state of one sync.
type SyncStatus struct {
	// Name of the sync.
	// +required
	Name string `json:"name"`

	// State of the sync.
	// +required
	State SyncState `json:"state"`

	// Revision is the source revision the sync's Flux objects last applied.
	// +optional
	Revision string `json:"revision,omitempty"`

	// Message says why the sync is in its state.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`

	// BlockedBy names the dependencies the sync waits for.
	// +optional
	BlockedBy []string `json:"blockedBy,omitempty"`

	// LastTransitionTime is when State last changed.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// SyncSummary counts the syncs of an assemblage by state.
type SyncSummary struct {
	// Total number of syncs.
	Total int32 `json:"total"`
	// Ready syncs.
	Ready int32 `json:"ready"`
	// Progressing syncs.
	Progressing int32 `json:"progressing"`
	// Blocked syncs.
	Blocked int32 `json:"blocked"`
	// Failed syncs.
	Failed int32 `json:"failed"`
}
