package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/registration"
	"github.com/fleeet-dev/fleeet/internal/enrol"
)

// Registrations records each registration a RegistrationToken admits.
// The policies decide whether a registration may happen; this makes the
// decision atomic: the Remote is recorded in the token's status, by name and
// UID, before it is stored, with an optimistic-concurrency update, so two
// agents racing for the last registration cannot both win.
type Registrations struct {
	// Reader reads tokens, ServiceAccounts and Remotes from the API, not a
	// cache: admission must see the latest count.
	Reader client.Reader
	// Writer records registrations in token status.
	Writer client.Client
}

// Record checks the token again and records the registration, retrying on
// conflicts; a refusal says why the registration may not happen.
func (r *Registrations) Record(ctx context.Context, req admission.Request, tokenName string, remote *fleeetv1.Remote) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		return r.reserve(ctx, req, tokenName, remote)
	})
}

// refusal is a reason to deny, as opposed to a failure to decide.
type refusal string

func (r refusal) Error() string { return string(r) }

// reserve checks the token and records the registration in its status.
func (r *Registrations) reserve(ctx context.Context, req admission.Request, tokenName string, remote *fleeetv1.Remote) error {
	tok := &fleeetv1.RegistrationToken{}
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: tokenName}, tok)
	if apierrors.IsNotFound(err) {
		return refusal(fmt.Sprintf("RegistrationToken %s no longer exists", tokenName))
	} else if err != nil {
		return err
	}
	if err := r.sameIdentity(ctx, req, tok); err != nil {
		return err
	}
	now := time.Now()
	used, limit := len(tok.Status.Registered), int(tok.Spec.MaxRegistrations)
	switch expires := registration.ExpiresAt(tok); {
	case !tok.DeletionTimestamp.IsZero():
		return refusal(fmt.Sprintf("RegistrationToken %s is being deleted", tokenName))
	case !now.Before(expires):
		return refusal(fmt.Sprintf("RegistrationToken %s expired at %s", tokenName, expires.UTC().Format(time.RFC3339)))
	case used >= limit:
		return refusal(fmt.Sprintf("RegistrationToken %s is used up: %d of %d registrations", tokenName, used, limit))
	}
	err = r.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: remote.Name}, &fleeetv1.Remote{})
	if err == nil {
		return refusal(fmt.Sprintf("metadata.name: a Remote named %s already exists in %s; enrol under another clusterName", remote.Name, req.Namespace))
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	if remote.UID == "" {
		return errors.New("the apiserver sent the Remote without a UID")
	}
	if req.DryRun != nil && *req.DryRun {
		return nil
	}
	tok.Status.Registered = append(tok.Status.Registered, fleeetv1.Registration{
		Name: remote.Name, UID: remote.UID, Time: metav1.NewTime(now),
	})
	tok.Status.Registrations = int32(len(tok.Status.Registered))
	return r.Writer.Status().Update(ctx, tok)
}

// sameIdentity checks that the requesting ServiceAccount is the one the
// manager created for this token, not one someone else made under its name.
func (r *Registrations) sameIdentity(ctx context.Context, req admission.Request, tok *fleeetv1.RegistrationToken) error {
	sa := &corev1.ServiceAccount{}
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: enrol.RegistrationName(tok.Name)}, sa)
	if apierrors.IsNotFound(err) {
		return refusal(fmt.Sprintf("the registration identity of RegistrationToken %s has been retired", tok.Name))
	} else if err != nil {
		return err
	}
	if !metav1.IsControlledBy(sa, tok) || string(sa.UID) != req.UserInfo.UID {
		return refusal(fmt.Sprintf("ServiceAccount %s is not the registration identity of RegistrationToken %s", sa.Name, tok.Name))
	}
	return nil
}
