package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// UpstreamSpec is one connection from a downstream cluster to one management
// namespace.
type UpstreamSpec struct {
	// Management is where the management cluster's API is and which of its
	// namespaces this cluster registers into.
	// +required
	Management ManagementEndpoint `json:"management"`

	// TokenSecretRef names a Secret in the Upstream's namespace holding the
	// registration token (key "token"). The agent forgets it once the cluster
	// holds its own credential.
	// +optional
	TokenSecretRef *LocalObjectReference `json:"tokenSecretRef,omitempty"`

	// ClusterName is the name of this cluster's Remote upstream.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterName string `json:"clusterName"`

	// Labels the agent asks for on its Remote, next to the token's: at
	// registration, and after it on every change (the Remote's
	// status.requestedLabels). The manager sets those under the keys the
	// registration freed and refuses the others, as the condition
	// LabelsApplied says. Labels under fleeet.dev/ are refused.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// AssemblageNamespace is where the local Assemblage and its Flux objects
	// live; defaults to the Upstream's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	AssemblageNamespace string `json:"assemblageNamespace,omitempty"`

	// ServiceAccountName is the ServiceAccount in the Assemblage's namespace
	// that Flux impersonates to apply this tenant's syncs and that the agent
	// impersonates to read their bindings; it overrides whatever the plan
	// says, so what a tenant can change or read here is decided here. The
	// agent refuses an Upstream without one (Stalled, reason
	// ServiceAccountNameUnset) and registers nothing for it: Flux would apply
	// the plan with its own, unconfined identity. Only an agent started with
	// --allow-unconfined-syncs accepts it empty, leaving the plan's choice.
	// The fleet-agent chart always sets it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// ManagementEndpoint locates a namespace of the management cluster's API.
type ManagementEndpoint struct {
	// URL of the management cluster's Kubernetes API.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https://\S+$`
	URL string `json:"url"`

	// CABundle is the PEM bundle that signs the API's serving certificate.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`

	// Namespace is the tenant namespace the cluster registers into.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`

	// RecoveryURL is the fleet manager's recovery endpoint: when the API
	// rejects the cluster's credential (expired while offline, or the
	// management cluster has a new signing key), the agent proves there that
	// it holds the Remote's recovery key and gets a new credential. Empty,
	// a rejected credential leaves the cluster Revoked.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https://\S+$`
	RecoveryURL string `json:"recoveryURL,omitempty"`

	// RecoveryCABundle is the PEM bundle that signs the recovery endpoint's
	// serving certificate.
	// +optional
	RecoveryCABundle []byte `json:"recoveryCABundle,omitempty"`
}

// UpstreamStatus is the observed state of an Upstream.
type UpstreamStatus struct {
	// ObservedGeneration is the spec generation the status describes; -1
	// until the first reconcile.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`

	// Conditions: Ready, Reconciling, Stalled, Registered, Connected,
	// FluxCompatible, LabelsApplied (the manager's answer to spec.labels).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Flux is the Flux this cluster runs, as reported on the Remote.
	// +optional
	Flux *FluxStatus `json:"flux,omitempty"`

	// CredentialSecretName is the Secret holding this cluster's own credential.
	// +optional
	CredentialSecretName string `json:"credentialSecretName,omitempty"`

	// CredentialExpiresAt is when the current credential expires; the agent
	// renews it well before.
	// +optional
	CredentialExpiresAt *metav1.Time `json:"credentialExpiresAt,omitempty"`

	// LastSyncTime is when the ProxyAssemblage was last mirrored.
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
}

// Upstream connects a downstream cluster to one management namespace: the
// agent registers with it, mirrors its ProxyAssemblage into a local
// Assemblage and reports status back. A cluster may hold one per tenant.
//
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || (size(self.metadata.name) <= 250 && !self.metadata.name.matches('[.]p[1-7]$'))",optionalOldSelf=true,message="metadata.name: at most 250 characters and not ending in .p1 to .p7, which name the further parts of a plan split over several objects"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=up;ups,categories=fleeet
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.management.namespace`
// +kubebuilder:printcolumn:name="Registered",type=string,JSONPath=`.status.conditions[?(@.type=="Registered")].status`
// +kubebuilder:printcolumn:name="Connected",type=string,JSONPath=`.status.conditions[?(@.type=="Connected")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.management.url`,priority=1
// +kubebuilder:printcolumn:name="Flux-Compatible",type=string,JSONPath=`.status.conditions[?(@.type=="FluxCompatible")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Upstream struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec UpstreamSpec `json:"spec,omitempty"`

	// Status is the observed state.
	// +kubebuilder:default={"observedGeneration":-1}
	Status UpstreamStatus `json:"status,omitempty"`
}

// UpstreamList is a list of Upstreams.
//
// +kubebuilder:object:root=true
type UpstreamList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Upstream `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Upstream{}, &UpstreamList{})
}
