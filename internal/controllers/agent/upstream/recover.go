package upstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/recovery"
)

// How long the agent waits before asking again: shortly after the endpoint
// failed to answer (the management cluster restarting, say), longer after
// it refused. The endpoint limits each address and each Remote
// (package recovery), answering 429 beyond that.
const (
	recoveryRetry        = 5 * time.Second
	recoveryRefusedRetry = 30 * time.Second
)

// recoveryError is a failed recovery: the agent keeps its last plan and
// tries again, however long that takes, since a
// rebuilt management cluster refuses until its Remotes are restored.
type recoveryError struct {
	err error
}

func (e recoveryError) Error() string {
	if errors.Is(e.err, recovery.ErrRefused) {
		return "the recovery endpoint refused this cluster's recovery key; retrying. Either the Remote is not (yet) restored " +
			"on the management cluster or was revoked, or it was last seen longer ago than the recovery grace, or another holder of this " +
			"cluster's key recovered it: then revoke the Remote and re-enrol the cluster (fleetctl reenrol)"
	}
	return fmt.Sprintf("recovering the cluster's credential: %v; retrying", e.err)
}

func (e recoveryError) Unwrap() error { return e.err }

// reason is the condition reason the failure is reported with.
func (e recoveryError) reason() string {
	if errors.Is(e.err, recovery.ErrRefused) {
		return fleeetv1.ReasonRecoveryRefused
	}
	return fleeetv1.ReasonRecoveryFailed
}

// retry is how long to wait before asking again.
func (e recoveryError) retry() time.Duration {
	if errors.Is(e.err, recovery.ErrRefused) {
		return recoveryRefusedRetry
	}
	return recoveryRetry
}

// recover gets the cluster a new credential when the management cluster
// rejects its own: it proves to spec.management.recoveryURL that it holds
// the Remote's recovery key, stores the first credential and the rotated
// key together at once (the old key is worthless from then on), then
// exchanges the first credential for one of its own.
func (r *Reconciler) recover(ctx context.Context, up *fleeetv1.Upstream) (credential.Token, error) {
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: up.Namespace, Name: credentialSecretName(up)}, secret); err != nil {
		return credential.Token{}, err
	}
	current, err := recovery.DecodePrivate(secret.Data[recovery.PrivateKeyKey])
	if err != nil {
		return credential.Token{}, refusal{msg: fmt.Sprintf("the management cluster rejects this cluster's credential and Secret %s holds no usable recovery key (%q: %v); "+
			"re-enrol the cluster (fleetctl reenrol)", secret.Name, recovery.PrivateKeyKey, err)}
	}
	next, err := recovery.NewKey()
	if err != nil {
		return credential.Token{}, err
	}
	m := up.Spec.Management
	first, err := recovery.Recover(ctx, m.RecoveryURL, m.RecoveryCABundle, m.Namespace, up.Spec.ClusterName, current, next)
	if err != nil {
		return credential.Token{}, recoveryError{err}
	}
	if err := r.storeCredential(ctx, up, first, next); err != nil {
		return credential.Token{}, err
	}
	r.Recorder.Eventf(up, nil, corev1.EventTypeNormal, fleeetv1.ReasonRecovered, "Recover",
		"Proved the recovery key to %s and got a new credential; the key is rotated", m.RecoveryURL)
	token, err := r.exchange(ctx, up, first)
	if err != nil {
		// The first credential works for its ten minutes, and the link
		// renews it before then.
		log.FromContext(ctx).Info("Keeping the first credential for now", "error", err.Error())
		return first, nil
	}
	return token, r.storeCredential(ctx, up, token, nil)
}
