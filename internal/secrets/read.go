package secrets

import (
	"context"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Labels returns labels with fleeetv1.ManagedByLabel added, in a new map:
// the labels of a Secret the manager writes for itself, so that its cache
// holds it.
func Labels(labels map[string]string) map[string]string {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	out[fleeetv1.ManagedByLabel] = fleeetv1.ManagedByManager
	return out
}

// Metadata is what a metadata read of Secret key fills in.
func Metadata(key client.ObjectKey) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	m.SetGroupVersionKind(secretKind)
	return m
}

// Version returns the resourceVersion of Secret key as c's metadata holds
// it; NotFound when c has not seen the Secret.
func Version(ctx context.Context, c client.Reader, key client.ObjectKey) (string, error) {
	m := Metadata(key)
	if err := c.Get(ctx, key, m); err != nil {
		return "", err
	}
	return m.ResourceVersion, nil
}

// Get reads Secret key, one the manager neither writes nor caches whole,
// into secret from live, the apiserver, once c's metadata says it exists.
// One c has not seen is NotFound without a request to the apiserver; the
// event that brings it into c's metadata (a builder.OnlyMetadata watch)
// brings the caller back. A nil live reads from c alone.
func Get(ctx context.Context, c, live client.Reader, key client.ObjectKey, secret *corev1.Secret) error {
	if live == nil {
		return c.Get(ctx, key, secret)
	}
	if _, err := Version(ctx, c, key); err != nil {
		return err
	}
	return live.Get(ctx, key, secret)
}

// GetOwned reads Secret key, one the manager writes for owner, into secret
// from c's cache. One the cache does not hold whole although its metadata
// says it exists — an older manager wrote it before
// fleeetv1.ManagedByLabel, or someone took the label off — is read from
// live, the apiserver, and labelled again when owner controls it, so that
// the cache holds it from then on; should the label not be written, the
// Secret is still returned, and read so again next time. One the cache has
// not seen at all is NotFound without a request to the apiserver. A nil
// live reads from c alone; a nil owner labels nothing.
func GetOwned(ctx context.Context, c client.Client, live client.Reader, owner client.Object, key client.ObjectKey, secret *corev1.Secret) error {
	err := c.Get(ctx, key, secret)
	if !apierrors.IsNotFound(err) || live == nil {
		return err
	}
	if _, err := Version(ctx, c, key); err != nil {
		return err
	}
	if err := live.Get(ctx, key, secret); err != nil {
		return err
	}
	if owner == nil || !metav1.IsControlledBy(secret, owner) || secret.Labels[fleeetv1.ManagedByLabel] == fleeetv1.ManagedByManager {
		return nil
	}
	patch := client.MergeFrom(secret.DeepCopy())
	secret.Labels = Labels(secret.Labels)
	if err := c.Patch(ctx, secret, patch); err != nil {
		// Its name and the error only: the patch held labels alone.
		log.FromContext(ctx).Info("Secret of the manager's own not labelled as such; it is read from the apiserver until it is",
			"secret", key.String(), "error", err.Error())
	}
	return nil
}

// Verdicts remembers what a check made of Secrets the manager does not
// cache whole, each at the resourceVersion checked, so that a Secret is
// read from the apiserver again only once its cached metadata shows it
// changed. It keeps the check's error, never the Secret.
type Verdicts struct {
	mu sync.Mutex
	m  map[client.ObjectKey]map[string]verdict
}

type verdict struct {
	version string
	err     error
}

// Check returns what check, for aspect (whatever else the check depends
// on, such as which key of the Secret it reads), says of Secret key: its
// error, nil when the Secret passes. It reads the Secret as Get does, and
// only when its resourceVersion differs from the one last checked; a read
// that fails returns its error, NotFound included, and remembers nothing.
func (v *Verdicts) Check(ctx context.Context, c, live client.Reader, key client.ObjectKey, aspect string, check func(*corev1.Secret) error) error {
	version, err := Version(ctx, c, key)
	if err != nil {
		if apierrors.IsNotFound(err) {
			v.mu.Lock()
			delete(v.m, key)
			v.mu.Unlock()
		}
		return err
	}
	v.mu.Lock()
	last, ok := v.m[key][aspect]
	v.mu.Unlock()
	if ok && last.version == version {
		return last.err
	}
	secret := &corev1.Secret{}
	if live == nil {
		live = c
	}
	if err := live.Get(ctx, key, secret); err != nil {
		return err
	}
	err = check(secret)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[client.ObjectKey]map[string]verdict{}
	}
	if v.m[key] == nil {
		v.m[key] = map[string]verdict{}
	}
	v.m[key][aspect] = verdict{version: secret.ResourceVersion, err: err}
	return err
}
