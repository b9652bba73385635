// Package delivery carries Secrets from a tenant namespace on the
// management cluster to the tenant's namespace on the clusters its syncs are
// placed on (spec.sync.secrets). It holds the rules both ends apply: which
// Secrets may be delivered at all (Check), how a pull Remote's bundle holds
// them (Encode, Decode), and how they are written downstream without ever
// touching a Secret the fleet did not deliver (Write, Prune).
//
// Only names travel through plans; secret material travels only in a
// Remote's bundle Secret, which that Remote's identity alone may read, and
// in the downstream Secrets themselves. Nothing here puts data into an
// error, a log or an event.
package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/secrets"
)

// MaxBundleBytes is how much data one bundle Secret may hold: the
// apiserver's limit on a Secret's data. A bundle past it is not written at
// all, rather than partially.
const MaxBundleBytes = corev1.MaxSecretSize

// Names returns the sorted, distinct names of the Secrets syncs deliver.
func Names(syncs []fleeetv1.NamedSync) []string {
	var names []string
	for i := range syncs {
		for _, s := range syncs[i].Secrets {
			names = append(names, s.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Read reads Secret key from c, the manager's cache, for Check to judge.
// That cache holds whole only the Secrets offered for delivery and fleeet's
// own, and of every other Secret its metadata (package secrets), which Read
// returns instead: without data or type and, whatever its labels say, not
// labelled deliverable, so that Check refuses it as not offered rather
// than it being reported missing, and so that it is never delivered empty.
// Such a Secret is not offered as far as the cache of whole Secrets knows;
// one labelled a moment ago reaches the reader again through that cache's
// event once it is cached whole. The error is NotFound when c holds
// neither.
func Read(ctx context.Context, c client.Reader, key client.ObjectKey) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	err := c.Get(ctx, key, secret)
	if !apierrors.IsNotFound(err) {
		return secret, err
	}
	m := secrets.Metadata(key)
	if err := c.Get(ctx, key, m); err != nil {
		return nil, err
	}
	meta := *m.ObjectMeta.DeepCopy()
	meta.Labels = maps.Clone(meta.Labels)
	delete(meta.Labels, fleeetv1.DeliverableLabel)
	return &corev1.Secret{ObjectMeta: meta}, nil
}

// Check says why secret may not be delivered, or nil when it may. A Secret
// is delivered only if its owner labelled it fleeet.dev/deliverable=true,
// it is not a ServiceAccount token, and it is not one of fleeet's own
// (registration tokens, cluster identities' credentials, bundles, owned by
// a fleeet.dev object or labelled fleeet.dev/managed-by) nor a push
// Remote's kubeconfig, named in kubeconfigs.
// The message names the Secret only.
func Check(secret *corev1.Secret, kubeconfigs map[string]bool) error {
	switch {
	case secret.Labels[fleeetv1.DeliverableLabel] != "true":
		return fmt.Errorf("Secret %s is not labelled %s=true; its owner has not offered it for delivery", secret.Name, fleeetv1.DeliverableLabel)
	case secret.Type == corev1.SecretTypeServiceAccountToken:
		return fmt.Errorf("Secret %s is a ServiceAccount token, which is never delivered", secret.Name)
	case fleeetOwned(secret):
		return fmt.Errorf("Secret %s belongs to fleeet (a registration token, a cluster identity or a delivery bundle) and is never delivered", secret.Name)
	case kubeconfigs[secret.Name]:
		return fmt.Errorf("Secret %s is a push Remote's kubeconfig, which is never delivered", secret.Name)
	}
	return nil
}

// fleeetOwned reports whether fleeet created secret for itself, or it is
// labelled as if fleeet had.
func fleeetOwned(secret *corev1.Secret) bool {
	if _, ok := secret.Labels[fleeetv1.ManagedByLabel]; ok {
		return true
	}
	if strings.HasPrefix(secret.Name, fleeetv1.RemoteIdentityPrefix) || strings.HasPrefix(secret.Name, fleeetv1.DeliveryBundlePrefix) {
		return true
	}
	if _, ok := secret.Labels[fleeetv1.RegistrationTokenLabel]; ok {
		return true
	}
	return slices.ContainsFunc(secret.OwnerReferences, func(ref metav1.OwnerReference) bool {
		return strings.HasPrefix(ref.APIVersion, fleeetv1.GroupVersion.Group+"/")
	})
}

// Item is one delivered Secret as a bundle holds it.
type Item struct {
	// Type is the Secret's type, kept downstream so Flux reads it as it
	// would the original (kubernetes.io/dockerconfigjson, for example).
	Type corev1.SecretType `json:"type,omitempty"`
	// Data is the Secret's data.
	Data map[string][]byte `json:"data,omitempty"`
}

// ItemOf is what secret delivers.
func ItemOf(secret *corev1.Secret) Item {
	return Item{Type: secret.Type, Data: secret.Data}
}

// Encode lays items out as a bundle Secret's data, one key per Secret name.
// It refuses, naming the size only, a bundle past MaxBundleBytes.
func Encode(items map[string]Item) (map[string][]byte, error) {
	data := map[string][]byte{}
	size := 0
	for name, item := range items {
		raw, err := json.Marshal(item)
		if err != nil {
			return nil, fmt.Errorf("encoding Secret %s into the bundle: %w", name, err)
		}
		data[name] = raw
		size += len(name) + len(raw)
	}
	if size > MaxBundleBytes {
		return nil, fmt.Errorf("the delivered Secrets need %d bytes, more than the %d a Secret may hold; nothing of the bundle was changed", size, MaxBundleBytes)
	}
	return data, nil
}

// Decode reads a bundle Secret's data back into items.
func Decode(data map[string][]byte) (map[string]Item, error) {
	items := map[string]Item{}
	for name, raw := range data {
		var item Item
		if err := json.Unmarshal(raw, &item); err != nil {
			// The JSON error could quote data: name the key only.
			return nil, fmt.Errorf("bundle entry %s is not a delivered Secret", name)
		}
		items[name] = item
	}
	return items, nil
}
