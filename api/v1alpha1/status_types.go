package v1alpha1

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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

// MaxSyncs is how many syncs an Assemblage holds: the maxItems of its
// spec.syncs, which bounds the cost of the per-sync validation rules (the
// marker on Syncs must say the same). The compiler leaves out a Module that
// would pass it rather than write a plan no cluster could mirror.
const MaxSyncs = 512

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

	// Parts is set on the first object of a plan split over several
	// (PlanPartName): entry k-1 is the PartRevision that part k must carry
	// for the plan to be whole. The plan is the union of every part's syncs,
	// each sync in exactly one part; nothing acts on a plan until every
	// listed part is read at its listed revision, so a half-written plan
	// never applies or prunes anything. Empty for a plan held in one object.
	// +optional
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:MaxLength=64
	Parts []string `json:"parts,omitempty"`

	// PartRevision is set on every part but the first: the revision the
	// first part lists for it, changed whenever the part's syncs change.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	PartRevision string `json:"partRevision,omitempty"`
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

	// Health is how the workloads the sync applied are doing; absent when
	// it applied none.
	// +optional
	Health *WorkloadHealth `json:"health,omitempty"`

	// Drift is the drift Flux found in the cluster: objects the sync
	// applied that were changed behind its back, and whether Flux put them
	// back. Absent when none was seen.
	// +optional
	Drift *SyncDrift `json:"drift,omitempty"`

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

// WorkloadHealth is how the workloads of one sync (the Deployments,
// StatefulSets and DaemonSets its Kustomization or HelmRelease applied) are
// doing, as the cluster's agent reads them: pods ready against pods wanted,
// and why pods are not ready. It informs; the sync's state stays Flux's
// verdict. Only counts, names and reasons are reported, never a container's
// message or logs.
type WorkloadHealth struct {
	// Workloads is how many workloads the sync applied; the agent reads at
	// most 32 of them.
	// +kubebuilder:validation:Minimum=0
	Workloads int32 `json:"workloads"`

	// ReadyPods is how many of their pods are ready.
	// +kubebuilder:validation:Minimum=0
	ReadyPods int32 `json:"readyPods"`

	// DesiredPods is how many pods they want.
	// +kubebuilder:validation:Minimum=0
	DesiredPods int32 `json:"desiredPods"`

	// Reason is why pods are not ready, from the first workload short of
	// ready pods: a container's waiting or termination reason as the kubelet
	// gives it (CrashLoopBackOff, ImagePullBackOff, OOMKilled…), or
	// Unschedulable, ReadinessProbeFailing, NoPods or NotFound.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]*$`
	Reason string `json:"reason,omitempty"`

	// Message says where: the workload, pod and container, such as
	// "Deployment web: pod web-7d9c-x4k2p: container app".
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
}

// Summary renders the health in a few words, such as "2/2 pods ready" or
// "0/2 pods ready: CrashLoopBackOff (Deployment web: pod web-x: container app)".
func (h *WorkloadHealth) Summary() string {
	if h == nil {
		return ""
	}
	s := fmt.Sprintf("%d/%d pods ready", h.ReadyPods, h.DesiredPods)
	switch {
	case h.Reason != "" && h.Message != "":
		s += ": " + h.Reason + " (" + h.Message + ")"
	case h.Reason != "":
		s += ": " + h.Reason
	case h.Message != "":
		s += ": " + h.Message
	}
	return s
}

// SyncDrift is what helm-controller reported, in its Drifted condition and
// its events, about changes made in the cluster to the objects of a sync's
// release. Only counts and object names are reported, never what changed.
// The counts cover the events the cluster kept (Kubernetes keeps events one
// hour unless its apiserver says otherwise) when the agent last read them:
// each time helm-controller's Drifted condition moves.
type SyncDrift struct {
	// Detected is how many times drift was detected.
	// +kubebuilder:validation:Minimum=0
	Detected int32 `json:"detected"`

	// Corrected is how many times Flux put the drifted objects back.
	// +kubebuilder:validation:Minimum=0
	Corrected int32 `json:"corrected"`

	// Drifted is true while the cluster differs from the release: drift
	// detection only warns, or the correction failed.
	// +optional
	Drifted bool `json:"drifted,omitempty"`

	// LastDetected is when drift was last detected.
	// +optional
	LastDetected *metav1.Time `json:"lastDetected,omitempty"`

	// Objects that drifted last, as Kind/namespace/name (Kind/name for
	// cluster-scoped objects).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]+/([a-z0-9.-]+/)?[a-z0-9.:-]+$`
	Objects []string `json:"objects,omitempty"`
}

// Seen reports whether any drift was seen.
func (d *SyncDrift) Seen() bool { return d != nil && (d.Detected > 0 || d.Drifted) }

// Summary renders the drift in a few words, such as "drift detected 2×,
// corrected 2× (Deployment/apps/web)".
func (d *SyncDrift) Summary() string {
	if !d.Seen() {
		return ""
	}
	s := fmt.Sprintf("drift detected %d×, corrected %d×", d.Detected, d.Corrected)
	if d.Drifted {
		s += ", drifted now"
	}
	if len(d.Objects) > 0 {
		s += " (" + strings.Join(d.Objects, ", ") + ")"
	}
	return s
}
