package upstream

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/recovery"
)

// deliveryWait is how long after creating its Remote the agent expects the
// manager to have issued the cluster's first credential; until then it
// looks every credentialPoll, afterwards it reports a failure and backs off.
const (
	deliveryWait   = 2 * time.Minute
	credentialPoll = time.Second
)

// awaiting says the manager has not issued, or not yet let the registration
// identity read, the first credential of the Remote this agent created.
type awaiting struct {
	ns, name string
	// since is when the agent created the Remote.
	since time.Time
	err   error
}

func (a awaiting) Error() string {
	if a.overdue() {
		return fmt.Sprintf("the manager issued no credential for Remote %s/%s within %s: %v", a.ns, a.name, deliveryWait, a.err)
	}
	return fmt.Sprintf("created Remote %s/%s; waiting for the manager to issue its first credential", a.ns, a.name)
}

// overdue reports whether the wait has lasted longer than deliveryWait.
func (a awaiting) overdue() bool { return time.Since(a.since) > deliveryWait }

// refusal is an answer that retrying will not change: only a new
// registration token or a changed Upstream will. askAgain marks one that
// may change by itself, so the management cluster is asked again
// (refusalRecheck) though nothing changed downstream.
type refusal struct {
	msg      string
	askAgain bool
}

func (r refusal) Error() string { return r.msg }

// register registers the cluster with the registration token: it creates the
// cluster's Remote (unless an earlier attempt did), naming the
// RegistrationToken it comes through and the public half of a new recovery
// key, and, once the manager has issued the first credential (until then it
// returns awaiting, and the reconcile looks again shortly, holding no
// worker), exchanges it at once for a token the cluster minted for itself,
// so the handed-over one can be discarded. It returns that token and the
// recovery key, nil when another run of the agent created the Remote.
func (r *Reconciler) register(ctx context.Context, up *fleeetv1.Upstream) (credential.Token, ed25519.PrivateKey, error) {
	ref := up.Spec.TokenSecretRef
	if ref == nil {
		return credential.Token{}, nil, refusal{msg: "spec.tokenSecretRef: this cluster holds no credential for the management cluster and no registration token is configured"}
	}
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: up.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return credential.Token{}, nil, refusal{msg: fmt.Sprintf("spec.tokenSecretRef: Secret %s not found, and this cluster holds no credential", ref.Name)}
		}
		return credential.Token{}, nil, err
	}
	regToken, err := credential.TokenFromSecret(secret)
	if err != nil {
		return credential.Token{}, nil, refusal{msg: "spec.tokenSecretRef: " + err.Error()}
	}
	reg, err := client.New(managementConfig(up, func() string { return regToken.Value }), client.Options{Scheme: r.Client.Scheme()})
	if err != nil {
		return credential.Token{}, nil, err
	}
	ns, name := up.Spec.Management.Namespace, up.Spec.ClusterName
	key := client.ObjectKeyFromObject(up)
	first, err := firstCredential(ctx, reg, ns, name)
	created, ok := r.created(key)
	if err != nil && ok {
		if apierrors.IsUnauthorized(err) {
			return credential.Token{}, nil, registrationError(err)
		}
		return credential.Token{}, nil, awaiting{ns: ns, name: name, since: created.at, err: err}
	}
	if err != nil {
		token, err := registrationTokenName(ctx, reg, ns)
		if err != nil {
			return credential.Token{}, nil, err
		}
		labels := maps.Clone(up.Spec.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[fleeetv1.RegistrationTokenLabel] = token
		recoveryKey, err := recovery.NewKey()
		if err != nil {
			return credential.Token{}, nil, err
		}
		remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
			Annotations: map[string]string{fleeetv1.RecoveryKeyAnnotation: recovery.PublicKey(recoveryKey)}}}
		if err := reg.Create(ctx, remote); err != nil {
			return credential.Token{}, nil, registrationError(err)
		}
		r.Recorder.Eventf(up, nil, corev1.EventTypeNormal, fleeetv1.ReasonRegistered, "Register", "Created Remote %s/%s in the management cluster", ns, name)
		r.markCreated(key, pending{at: time.Now(), key: recoveryKey})
		return credential.Token{}, nil, awaiting{ns: ns, name: name, since: time.Now()}
	}
	token, err := r.exchange(ctx, up, first)
	return token, created.key, err
}

// exchange mints, with the first credential the manager issued, a token of
// the cluster's own.
func (r *Reconciler) exchange(ctx context.Context, up *fleeetv1.Upstream, first credential.Token) (credential.Token, error) {
	own, err := client.New(managementConfig(up, func() string { return first.Value }), client.Options{Scheme: r.Client.Scheme()})
	if err != nil {
		return credential.Token{}, err
	}
	token, err := credential.Mint(ctx, own, up.Spec.Management.Namespace, fleeetv1.RemoteIdentityName(up.Spec.ClusterName), r.lifetime(), nil)
	if err != nil {
		return credential.Token{}, fmt.Errorf("exchanging the first credential for the cluster's own: %w", err)
	}
	return token, nil
}

// registrationTokenName asks the management cluster who the registration
// token authenticates as, and returns the name of the RegistrationToken
// whose identity that is. The Remote must carry it: the manager learns from
// it which token to count the registration against, and admission checks
// it against the identity creating the Remote.
func registrationTokenName(ctx context.Context, reg client.Client, ns string) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := reg.Create(ctx, review); err != nil {
		if apierrors.IsUnauthorized(err) {
			return "", registrationError(err)
		}
		return "", fmt.Errorf("asking the management cluster who the registration token is: %w", untrustedCA(err))
	}
	user := review.Status.UserInfo.Username
	token, ok := fleeetv1.RegistrationTokenOfUser(user, ns)
	if !ok {
		return "", refusal{msg: fmt.Sprintf("spec.tokenSecretRef: the token authenticates as %s, not as a RegistrationToken's identity in namespace %s", user, ns)}
	}
	return token, nil
}

// untrustedCA explains a management API whose serving certificate the CA
// the Upstream trusts did not sign: retrying changes nothing until one of
// them changes, so it says which, and what to do.
func untrustedCA(err error) error {
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); !ok {
		return err
	}
	return fmt.Errorf("the management API's serving certificate is not signed by the CA in spec.management.caBundle "+
		"(the one the enrolment string carried): the token is for another management cluster, or that cluster's CA changed; "+
		"create a new token: %w", err)
}

// registrationError explains why the management cluster refused a Remote.
func registrationError(err error) error {
	switch {
	case apierrors.IsUnauthorized(err):
		return refusal{msg: "the management cluster rejected the registration token (HTTP 401): it has expired or been revoked; create a new RegistrationToken"}
	case apierrors.IsForbidden(err) && !strings.Contains(err.Error(), " denied the request"):
		// RBAC's refusal, not admission's: the token's identity lost its
		// rights, as while a token that expired or was revoked is taken
		// apart (its Role goes with its ServiceAccount, in no set order).
		// Asked again, the answer says what came of it.
		return refusal{msg: "the management cluster refused the registration: " + err.Error(), askAgain: true}
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsAlreadyExists(err):
		return refusal{msg: "the management cluster refused the registration: " + err.Error()}
	}
	return fmt.Errorf("creating the cluster's Remote: %w", err)
}

// firstCredential reads the credential the manager issued for the cluster.
func firstCredential(ctx context.Context, reg client.Client, ns, name string) (credential.Token, error) {
	secret := &corev1.Secret{}
	if err := reg.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleeetv1.RemoteIdentityName(name)}, secret); err != nil {
		return credential.Token{}, err
	}
	return credential.TokenFromSecret(secret)
}
