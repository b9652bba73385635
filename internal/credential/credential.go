// Package credential holds what the manager and the agent agree on about
// the bearer tokens of pull registration: the keys of the Secrets that carry
// them, their lifetimes, how they are minted, and the agent chart values a
// RegistrationToken's Secret holds. The names of the identities are in
// api/v1alpha1.
package credential

import (
	"context"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

const (
	// TokenKey is the key of a bearer token in every Secret fleeet writes.
	TokenKey = "token"

	// ExpiresAtKey is the key of a token's expiry (RFC 3339) next to it.
	ExpiresAtKey = "expiresAt"

	// ChartKey is the key of the fleet-agent chart the fleet was released
	// with, as helm install takes it, in a RegistrationToken's Secret.
	ChartKey = "chart"

	// ValuesKey is the key of the fleet-agent chart values in a
	// RegistrationToken's Secret, for `helm install fleet-agent -f`.
	ValuesKey = "values.yaml"

	// MinLifetime is the shortest lifetime the TokenRequest API grants.
	MinLifetime = 10 * time.Minute

	// FirstLifetime is how long the first token of a cluster's
	// identity lives. It is handed over through a management Secret, so the
	// agent exchanges it for a token of its own at once and the Secret is
	// deleted; it is the shortest lifetime the API grants.
	FirstLifetime = MinLifetime

	// Lifetime is how long each token an agent mints for its own
	// cluster identity lives unless the agent is told a shorter one
	// (CheckLifetime), and the longest the manager lets a cluster mint.
	// Renewal at 80% leaves 20% of it, 4.8 hours, as the longest
	// management outage an agent rides out with its token; beyond it the
	// agent recovers (package recovery) where the manager serves the
	// recovery endpoint. A leaked token cannot outlive it, and deleting the
	// Remote revokes every token of the cluster at once in any case.
	Lifetime = 24 * time.Hour

	// DeliveryDeadline is how long after registration the manager keeps
	// offering the first credential to an agent that has not connected yet.
	DeliveryDeadline = FirstLifetime
)

// Token is a bearer token and when it expires.
type Token struct {
	Value     string
	ExpiresAt time.Time
}

// Mint requests a token for the ServiceAccount ns/name through the
// TokenRequest API. A non-nil boundTo binds the token to that Secret: it
// stops working when the Secret is deleted.
func Mint(ctx context.Context, c client.Client, ns, name string, lifetime time.Duration, boundTo *corev1.Secret) (Token, error) {
	seconds := int64(max(lifetime, MinLifetime) / time.Second)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	if boundTo != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{
			Kind: "Secret", APIVersion: "v1", Name: boundTo.Name, UID: boundTo.UID,
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.SubResource("token").Create(ctx, sa, req); err != nil {
		return Token{}, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", ns, name, err)
	}
	return Token{Value: req.Status.Token, ExpiresAt: req.Status.ExpirationTimestamp.Time}, nil
}

// CheckLifetime says why lifetime cannot be the lifetime of the tokens an
// agent mints for its cluster's identity, or nil when it can: from
// MinLifetime, the shortest the API grants, to Lifetime, the longest the
// manager allows.
func CheckLifetime(lifetime time.Duration) error {
	if lifetime < MinLifetime || lifetime > Lifetime {
		return fmt.Errorf("%s is not a credential lifetime: it must be from %s (the shortest token the Kubernetes API grants) to %s (the longest the fleet manager allows)",
			lifetime, MinLifetime, Lifetime)
	}
	return nil
}

// RenewAt is when a token obtained at obtained should be replaced: after
// 80% of its lifetime.
func (t Token) RenewAt(obtained time.Time) time.Time {
	return obtained.Add(t.ExpiresAt.Sub(obtained) * 4 / 5)
}

// SecretData is how a token is stored in a Secret.
func (t Token) SecretData() map[string][]byte {
	return map[string][]byte{
		TokenKey:     []byte(t.Value),
		ExpiresAtKey: []byte(t.ExpiresAt.UTC().Format(time.RFC3339)),
	}
}

// TokenFromSecret reads a token stored with SecretData.
func TokenFromSecret(s *corev1.Secret) (Token, error) {
	value := strings.TrimSpace(string(s.Data[TokenKey]))
	if value == "" {
		return Token{}, fmt.Errorf("Secret %s/%s has no %q key", s.Namespace, s.Name, TokenKey)
	}
	t := Token{Value: value}
	if at, ok := s.Data[ExpiresAtKey]; ok {
		parsed, err := time.Parse(time.RFC3339, string(at))
		if err != nil {
			return Token{}, fmt.Errorf("Secret %s/%s: key %q is not an RFC 3339 time", s.Namespace, s.Name, ExpiresAtKey)
		}
		t.ExpiresAt = parsed
	}
	return t, nil
}

// AgentValues are the fleet-agent chart values a RegistrationToken's Secret
// carries, ready for `helm install fleet-agent -f values.yaml --set clusterName=…`.
type AgentValues struct {
	Token      string     `json:"token"`
	Management Management `json:"management"`
}

// Management locates the management cluster's API and the tenant namespace.
type Management struct {
	URL       string `json:"url"`
	CABundle  []byte `json:"caBundle,omitempty"`
	Namespace string `json:"namespace"`
	// RecoveryURL and RecoveryCABundle locate the fleet manager's recovery
	// endpoint (Upstream spec.management.recoveryURL); empty when the
	// manager serves none.
	RecoveryURL      string `json:"recoveryURL,omitempty"`
	RecoveryCABundle []byte `json:"recoveryCABundle,omitempty"`
}

// YAML renders the values; the CA bundle is base64, as the chart expects.
func (v AgentValues) YAML() ([]byte, error) { return yaml.Marshal(v) }
