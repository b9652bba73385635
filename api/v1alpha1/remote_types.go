package v1alpha1

import (
	"maps"
	"slices"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RemoteMode says how the manager reaches a Remote.
// +kubebuilder:validation:Enum=Push;Pull
type RemoteMode string

const (
	// PushMode: the manager holds a kubeconfig and writes to the cluster.
	PushMode RemoteMode = "Push"
	// PullMode: the cluster's agent connects to the management cluster.
	PullMode RemoteMode = "Pull"
)

// RemoteSpec describes how a downstream cluster is reached. Modules select
// Remotes by the Remote's labels.
type RemoteSpec struct {
	// KubeconfigRef names a Secret in the Remote's namespace holding a
	// kubeconfig for the cluster. Present means push mode: the manager writes
	// the Assemblage itself. Absent means pull mode: the cluster's agent,
	// registered with a RegistrationToken, pulls its ProxyAssemblage.
	// +optional
	KubeconfigRef *SecretKeyReference `json:"kubeconfigRef,omitempty"`

	// ServiceAccountName is, for a push Remote, the ServiceAccount in the
	// downstream Assemblage's namespace that Flux impersonates to apply the
	// syncs, so what a tenant's plan changes stays within what that account
	// may touch. It is the push counterpart of an Upstream's
	// serviceAccountName and overrides whatever the plan says. Required in
	// push mode: a push Remote without it is not delivered to. Pull Remotes
	// ignore it; their Upstream decides.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// Suspend stops delivering the plan to this Remote: its ProxyAssemblage
	// stays as it is (new Module versions, retries and hand edits alike wait)
	// and what runs stays. Rollouts pass a suspended Remote by, as they do an
	// offline one, and count it in their summary's suspended.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// RemoteStatus is the observed state of a Remote. Several writers share it,
// each applying only the fields it owns with server-side apply under its own
// field manager (see internal/status), so none overwrites another:
//   - fleet-manager-remote-health (pull Remotes): mode, lastHeartbeatTime and
//     the Connected, Ready and AgentCompatible conditions, from the agent's
//     Lease and reported version;
//   - fleet-manager-push (push Remotes): mode, lastHeartbeatTime and the
//     Connected, Ready and Stalled conditions, from delivering the plan;
//   - fleet-manager-registration: the Registered condition;
//   - fleet-agent (the cluster itself; fleet-manager-push for push Remotes):
//     agentVersion, readsCompiledSyncs, readsCompiledPlans and kubernetesVersion (pull only), flux and the
//     FluxCompatible condition.
//
// observedGeneration is applied by each manager writer with the generation
// it judged.
type RemoteStatus struct {
	// ObservedGeneration is the spec generation the status describes; -1
	// until the first reconcile.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`

	// Conditions: Ready, Reconciling, Stalled, Connected, Registered (pull),
	// FluxCompatible, AgentCompatible (pull), LabelsApplied (registered pull Remotes).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Mode is Push or Pull.
	// +optional
	Mode RemoteMode `json:"mode,omitempty"`

	// LastHeartbeatTime is when the cluster was last heard from, as of the
	// Remote's last status write. A pull Remote's is its agent's last Lease
	// renewal, recorded when the Remote turns online or offline or its
	// status otherwise changes, and whenever it falls 15 minutes behind
	// while the Remote stays online: the Lease named after the Remote holds
	// the latest, and Connected is judged from it. A push Remote's is when
	// its cluster was last reached, recorded at most once a minute.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`

	// AgentVersion is the version of the fleet agent serving the cluster.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`

	// ReadsCompiledSyncs says the cluster's agent resolves plan entries
	// that name a CompiledSync (NamedSync.Content). The manager writes such
	// entries into a pull Remote's plan only when its agent says so, and
	// every sync whole otherwise, so an agent older than CompiledSyncs
	// keeps getting plans it understands.
	// +optional
	ReadsCompiledSyncs bool `json:"readsCompiledSyncs,omitempty"`

	// ReadsCompiledPlans says the cluster's agent also reads the entries a
	// plan part shares with other Remotes from the CompiledPlan it names
	// (ProxyAssemblageSpec.CompiledPlan). The manager writes such parts for
	// a pull Remote only when its agent says so, so an agent older than
	// CompiledPlans keeps getting plans it understands.
	// +optional
	ReadsCompiledPlans bool `json:"readsCompiledPlans,omitempty"`

	// KubernetesVersion is the cluster's Kubernetes version.
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`

	// Flux is the Flux the cluster runs, read from the CustomResourceDefinitions
	// of the kinds fleeet writes there; the FluxCompatible condition says
	// whether those serve the API versions fleeet writes.
	// +optional
	Flux *FluxStatus `json:"flux,omitempty"`

	// RequestedLabels are the labels the cluster's agent asks for on this
	// Remote: its Upstream's spec.labels, written by the cluster. The
	// manager sets on the Remote's metadata those under the keys its
	// registration freed (annotation fleeet.dev/free-label-keys), removes
	// freed keys no longer asked for, and names each key it refuses, and
	// why, in the condition LabelsApplied. Unset leaves the labels alone.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	RequestedLabels map[string]string `json:"requestedLabels,omitempty"`
}

// FluxStatus is the Flux a cluster runs, read from the
// app.kubernetes.io/version labels of the CustomResourceDefinitions of
// GitRepository, HelmRepository, Kustomization and HelmRelease.
type FluxStatus struct {
	// Version is Flux's version when all those CRDs carry the same label, as
	// `flux install` labels them with Flux's release (v2.7.3); "unknown" when
	// none carries one. Empty when they differ: see controllers.
	// +optional
	Version string `json:"version,omitempty"`

	// Controllers are, when the CRDs carry different versions, each Flux
	// controller's version from the CRDs it serves (source-controller,
	// kustomize-controller, helm-controller), as a Flux installed controller
	// by controller labels them; "unknown" for a controller whose CRDs carry
	// no label.
	// +optional
	Controllers map[string]string `json:"controllers,omitempty"`
}

// String is the Flux version, or each controller's, in one line; empty
// when nothing was read.
func (f *FluxStatus) String() string {
	if f == nil {
		return ""
	}
	if f.Version != "" {
		return f.Version
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(f.Controllers)) {
		parts = append(parts, name+" "+f.Controllers[name])
	}
	return strings.Join(parts, ", ")
}

// Remote is a downstream cluster as one tenant sees it.
//
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || (size(self.metadata.name) <= 250 && !self.metadata.name.matches('[.]p[1-7]$'))",optionalOldSelf=true,message="metadata.name: at most 250 characters and not ending in .p1 to .p7, which name the further parts of a plan split over several objects"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rem;rems,categories=fleeet
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.status.mode`
// +kubebuilder:printcolumn:name="Connected",type=string,JSONPath=`.status.conditions[?(@.type=="Connected")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.lastHeartbeatTime`
// +kubebuilder:printcolumn:name="Kubernetes",type=string,JSONPath=`.status.kubernetesVersion`,priority=1
// +kubebuilder:printcolumn:name="Flux",type=string,JSONPath=`.status.flux.version`,priority=1
// +kubebuilder:printcolumn:name="Flux-Compatible",type=string,JSONPath=`.status.conditions[?(@.type=="FluxCompatible")].status`,priority=1
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.agentVersion`,priority=1
// +kubebuilder:printcolumn:name="Agent-Compatible",type=string,JSONPath=`.status.conditions[?(@.type=="AgentCompatible")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Remote struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec RemoteSpec `json:"spec,omitempty"`

	// Status is the observed state.
	// +kubebuilder:default={"observedGeneration":-1}
	Status RemoteStatus `json:"status,omitempty"`
}

// RemoteList is a list of Remotes.
//
// +kubebuilder:object:root=true
type RemoteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Remote `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Remote{}, &RemoteList{})
}

// Offline reports whether the Remote is known to be unreachable: its
// Connected condition is False. A Remote never judged yet is not offline.
func (r *Remote) Offline() bool {
	c := apimeta.FindStatusCondition(r.Status.Conditions, ConnectedCondition)
	return c != nil && c.Status == metav1.ConditionFalse
}

// AwaitingAdoption reports whether the Remote came through a
// RegistrationToken and the manager has not adopted it yet: until then its
// labels are the registrant's, not the token's, so nothing is compiled for
// it.
func (r *Remote) AwaitingAdoption() bool {
	_, registered := r.Labels[RegistrationTokenLabel]
	return registered && !slices.Contains(r.Finalizers, RemoteIdentityFinalizer)
}

// RemoteIdentityPrefix starts the name of a pull Remote's ServiceAccount,
// Role, RoleBinding and first-credential Secret.
const RemoteIdentityPrefix = "fleeet-remote-"

// RemoteIdentityName is the name of pull Remote remote's identity and of
// the Secret delivering its first credential.
func RemoteIdentityName(remote string) string { return RemoteIdentityPrefix + remote }

// RecoveryKeyAnnotation on a pull Remote is the Ed25519 public key
// (standard base64) of the key its cluster proves possession of to get a
// new credential when the management cluster rejects its own; the
// registrant sets it on create, the fleet manager rotates it on each
// recovery, and the cluster identity may not change it.
const RecoveryKeyAnnotation = "fleeet.dev/recovery-key"

// ReenrolledAtAnnotation on a pull Remote is when (RFC 3339) fleetctl
// reenrol named a new recovery key on it: the recovery grace counts from
// then as well as from the last heartbeat.
const ReenrolledAtAnnotation = "fleeet.dev/reenrolled-at"

// DeliveryBundlePrefix starts the name of the Secret in a pull Remote's
// namespace that holds every Secret delivered to its cluster.
const DeliveryBundlePrefix = "fleeet-deliveries-"

// DeliveryBundleName is the name of pull Remote remote's delivery bundle,
// the one Secret its identity may read.
func DeliveryBundleName(remote string) string { return DeliveryBundlePrefix + remote }

// RemoteOfUser returns the pull Remote whose cluster identity the user is,
// if it is one in namespace ns.
func RemoteOfUser(username, ns string) (string, bool) {
	return serviceAccountWithPrefix(username, ns, RemoteIdentityPrefix)
}
