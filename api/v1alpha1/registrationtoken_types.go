package v1alpha1

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// RegistrationTokenSpec is a capability to register downstream clusters into the
// token's namespace.
type RegistrationTokenSpec struct {
	// TTL is how long the token can be used after it is created.
	// +optional
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(s|m|h))+$`
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// MaxRegistrations is how many clusters may register with the token.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxRegistrations int32 `json:"maxRegistrations,omitempty"`

	// RemoteLabels are set on every Remote registered with the token. A
	// registering cluster may repeat them but not choose other values.
	// +optional
	RemoteLabels map[string]string `json:"remoteLabels,omitempty"`

	// FreeLabelKeys are the label keys whose values a registering cluster
	// chooses itself (the fleet-agent chart's labels). Without them a
	// registered Remote carries exactly the token's remoteLabels, so a leaked
	// token cannot place a cluster under other Modules' selectors. Keys under
	// fleeet.dev/ are set only by the fleet manager and cannot be freed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('fleeet.dev/') && !k.contains('.fleeet.dev/'))",message="keys under fleeet.dev/ are set only by the fleet manager and cannot be freed"
	FreeLabelKeys []string `json:"freeLabelKeys,omitempty"`
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

	// Registrations is how many clusters have registered with the token.
	// +optional
	Registrations int32 `json:"registrations,omitempty"`

	// Registered lists the Remotes registered with the token. The manager
	// records them from the Remotes the token's identity created (labelled
	// fleeet.dev/registration-token with the token's name), in creation
	// order, before the token expired and at most maxRegistrations; entries
	// are never removed. Only a Remote whose UID is listed receives a cluster
	// identity; the others are refused and deleted. Only the manager writes
	// a RegistrationToken's status.
	// +optional
	// +listType=map
	// +listMapKey=uid
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

	// UID of the Remote, which tells it apart from a later Remote of the
	// same name.
	UID types.UID `json:"uid"`

	// Time the manager recorded the registration; the first credential is
	// offered from then on for a limited time.
	Time metav1.Time `json:"time"`
}

// RegistrationToken lets downstream clusters register by pulling: the manager
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

// DefaultRegistrationTokenTTL is a RegistrationToken's lifetime when
// spec.ttl is unset.
const DefaultRegistrationTokenTTL = time.Hour

// RegistrationIdentityPrefix starts the name of a RegistrationToken's
// ServiceAccount, Role, RoleBinding and token Secret.
const RegistrationIdentityPrefix = "fleeet-registration-"

// ExpiresAt is when the token stops admitting registrations.
func (t *RegistrationToken) ExpiresAt() time.Time {
	ttl := DefaultRegistrationTokenTTL
	if t.Spec.TTL != nil {
		ttl = t.Spec.TTL.Duration
	}
	return t.CreationTimestamp.Add(ttl)
}

// RegistrationIdentityName is the name of RegistrationToken token's
// identity and Secret.
func RegistrationIdentityName(token string) string { return RegistrationIdentityPrefix + token }

// RegistrationTokenOfUser returns the RegistrationToken whose registration
// identity the user is, if it is one in namespace ns.
func RegistrationTokenOfUser(username, ns string) (string, bool) {
	return serviceAccountWithPrefix(username, ns, RegistrationIdentityPrefix)
}

// serviceAccountWithPrefix returns what follows prefix in the name of the
// ServiceAccount of namespace ns that the user is, if it is one.
func serviceAccountWithPrefix(username, ns, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(username, "system:serviceaccount:"+ns+":"+prefix)
	return rest, ok && rest != ""
}
