package assemblage

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/flux"
)

// checkReads makes sure that reader, acting as the tenant's ServiceAccount,
// may read every ConfigMap and Secret of namespace that Flux reads to run
// a sync (flux.Reads: source credentials and certificates, signature and
// decryption keys, valuesFrom, substituteFrom). Flux's controllers read
// those with their own rights, not the account's they impersonate to
// apply, so without this a tenant could have a Secret it may not read —
// another tenant's in a shared namespace, or a platform team's repository
// credentials — rendered into objects it may, or sent to a server of its
// choosing. A Secret the sync delivers itself needs no check: it is the
// tenant's own, and the sync waits until the fleet has delivered it. Only metadata is read; a missing object
// is left for Flux to report (or skip, when optional). Errors name the
// object and the field, never data.
func checkReads(ctx context.Context, reader client.Reader, namespace string, reads []flux.Read, delivers []fleeetv1.SecretDelivery) error {
	for _, r := range reads {
		if r.Kind == "Secret" && slices.Contains(delivers, fleeetv1.SecretDelivery{Name: r.Name}) {
			continue
		}
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(r.Kind))
		switch err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: r.Name}, obj); {
		case apierrors.IsForbidden(err):
			return fmt.Errorf("%s: the tenant's ServiceAccount may not read %s %s/%s", r.Field, r.Kind, namespace, r.Name)
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("%s: reading %s %s/%s: %w", r.Field, r.Kind, namespace, r.Name, err)
		}
	}
	return nil
}
