package webhooks

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Registrations looks up what the registration policy needs to judge a
// registration identity's request. It only reads: admission has no side
// effects, so a caller that reaches the webhook without going through the
// apiserver learns a verdict and changes nothing. The manager records a
// registration later, from the Remote the apiserver stored (see
// internal/controllers/manager/registration).
type Registrations struct {
	// Reader reads tokens, ServiceAccounts and Remotes from the apiserver,
	// not a cache: a registration must be judged on the latest count.
	Reader client.Reader
}

// lookUp adds, for the registration identity of RegistrationToken token in
// namespace ns:
//   - registrationToken: the token, absent once it is deleted;
//   - registrationIdentity: the uid of the ServiceAccount the manager
//     created for the token, absent if there is none, so a ServiceAccount
//     someone else made under the same name is not taken for it;
//   - registrationRemotes: the name and uid of every Remote labelled as
//     created through the token, recorded or not yet, so agents a moment
//     apart do not both pass while the manager catches up.
func (r *Registrations) lookUp(ctx context.Context, ns, token string, into map[string]any) error {
	tok := &fleeetv1.RegistrationToken{}
	switch err := r.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: token}, tok); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("looking up RegistrationToken %s: %w", token, err)
	}
	into["registrationToken"] = tok

	sa := &corev1.ServiceAccount{}
	switch err := r.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleeetv1.RegistrationIdentityName(token)}, sa); {
	case err == nil && metav1.IsControlledBy(sa, tok):
		into["registrationIdentity"] = map[string]any{"uid": sa.UID}
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("looking up ServiceAccount %s: %w", fleeetv1.RegistrationIdentityName(token), err)
	}

	remotes := &metav1.PartialObjectMetadataList{}
	remotes.SetGroupVersionKind(fleeetv1.GroupVersion.WithKind("RemoteList"))
	if err := r.Reader.List(ctx, remotes, client.InNamespace(ns), client.MatchingLabels{fleeetv1.RegistrationTokenLabel: token}); err != nil {
		return fmt.Errorf("listing the Remotes of RegistrationToken %s: %w", token, err)
	}
	stored := make([]map[string]any, 0, len(remotes.Items))
	for _, o := range remotes.Items {
		stored = append(stored, map[string]any{"name": o.Name, "uid": o.UID})
	}
	into["registrationRemotes"] = stored
	return nil
}
