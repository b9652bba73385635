package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// RegistrationTokenSpec is a capability to enrol downstream clusters into the
// token's namespace.
type RegistrationTokenSpec struct {
	// TTL is how long the token can be used after it is created.
	// +optional
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(s|m|h))+$`
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// MaxRegistrations is how many clusters may enrol with the token.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxRegistrations int32 `json:"maxRegistrations,omitempty"`

	// RemoteLabels are set on every Remote registered with the token.
	// +optional
	RemoteLabels map[string]string `json:"remoteLabels,omitempty"`
}

// RegistrationTokenStatus is the observed state of a RegistrationToken.
type RegistrationTokenStatus struct {
	// ObservedGeneration is the spec generation the status describes; -1
	// until the first reconcile.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`

	// Conditions: Ready, Reconciling, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ExpiresAt is when the token stops working.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`

	// Registrations is how many clusters have enrolled with the token.
	// +optional
	Registrations int32 `json:"registrations,omitempty"`

	// Registered lists the Remotes created with the token, each recorded by
	// the admission webhook before the Remote was stored. Only a Remote whose
	// name and UID match an entry receives a cluster identity.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	Registered []Registration `json:"registered,omitempty"`

	// SecretName is the Secret holding the bearer token and the agent chart
	// values for `helm install fleet-agent -f`.
	// +optional
	SecretName string `json:"secretName,omitempty"`
}

// Registration is one Remote created with a RegistrationToken.
type Registration struct {
	// Name of the Remote.
	Name string `json:"name"`

	// UID of the Remote, as admitted.
	UID types.UID `json:"uid"`

	// Time the registration was admitted.
	Time metav1.Time `json:"time"`
}

// RegistrationToken lets downstream clusters enrol by pulling: the manager
// mints a short-lived bearer token for a ServiceAccount whose only right is
// to create a pull Remote in this namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rtok;rtoks,categories=fleeet
// +kubebuilder:printcolumn:name="Used",type=integer,JSONPath=`.status.registrations`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxRegistrations`
// +kubebuilder:printcolumn:name="Expires",type=date,JSONPath=`.status.expiresAt`
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.status.secretName`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RegistrationToken struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec RegistrationTokenSpec `json:"spec,omitempty"`

	// Status is the observed state.
	// +kubebuilder:default={"observedGeneration":-1}
	Status RegistrationTokenStatus `json:"status,omitempty"`
}

// RegistrationTokenList is a list of RegistrationTokens.
//
// +kubebuilder:object:root=true
type RegistrationTokenList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RegistrationToken `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RegistrationToken{}, &RegistrationTokenList{})
}
