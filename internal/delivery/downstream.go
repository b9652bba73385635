package delivery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Delivered reports whether secret is one the fleet delivered for asm: it
// carries DeliveredLabel and asm is its controller.
func Delivered(secret *corev1.Secret, asm *fleeetv1.Assemblage) bool {
	return secret.Labels[fleeetv1.DeliveredLabel] == "true" && metav1.IsControlledBy(secret, asm)
}

// Write writes each item as a Secret of the same name in asm's namespace,
// labelled as delivered and controlled by asm, so that it goes when the
// Assemblage does. Existing Secrets are looked up in delivered, a reader
// holding only the Secrets the fleet delivered (the agent's cache; nil when
// there is none), then through live by their metadata alone: the data of a
// Secret the fleet did not deliver is never read. Such a Secret is left
// alone and its name returned among the conflicts. A delivered Secret
// whose type changed is replaced (a Secret's type cannot be updated).
// Errors name Secrets, never data.
func Write(ctx context.Context, c client.Client, delivered, live client.Reader, asm *fleeetv1.Assemblage, items map[string]Item) (conflicts []string, err error) {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(items)) {
		item := items[name]
		held, ours, err := read(ctx, delivered, live, client.ObjectKey{Namespace: asm.Namespace, Name: name}, asm)
		switch {
		case apierrors.IsNotFound(err):
			err = create(ctx, c, asm, name, item)
		case err != nil:
		case !ours:
			conflicts = append(conflicts, name)
			continue
		case held.Type != item.Type:
			uid := held.UID
			if err = c.Delete(ctx, held, client.Preconditions{UID: &uid}); err == nil {
				err = create(ctx, c, asm, name, item)
			}
		case !maps.EqualFunc(held.Data, item.Data, slices.Equal):
			held.Data = item.Data
			err = c.Update(ctx, held)
		}
		if apierrors.IsAlreadyExists(err) {
			// Created by someone else since it was read: theirs.
			conflicts, err = append(conflicts, name), nil
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delivering Secret %s/%s: %w", asm.Namespace, name, err))
		}
	}
	return conflicts, errors.Join(errs...)
}

// read returns the Secret key and whether the fleet delivered it for asm
// (ours), or a NotFound error when there is none. It reads delivered first;
// a Secret that reader does not hold is read through live by its metadata,
// and its data only when the metadata says the fleet delivered it for asm
// (the cache of delivered Secrets lagging behind). A Secret that is not
// ours is returned with its metadata only.
func read(ctx context.Context, delivered, live client.Reader, key client.ObjectKey, asm *fleeetv1.Assemblage) (held *corev1.Secret, ours bool, err error) {
	held = &corev1.Secret{}
	if delivered != nil {
		err := delivered.Get(ctx, key, held)
		if err == nil && Delivered(held, asm) {
			return held, true, nil
		}
		if client.IgnoreNotFound(err) != nil {
			return nil, false, err
		}
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := live.Get(ctx, key, meta); err != nil {
		return nil, false, err
	}
	if meta.Labels[fleeetv1.DeliveredLabel] != "true" || !metav1.IsControlledBy(meta, asm) {
		return &corev1.Secret{ObjectMeta: meta.ObjectMeta}, false, nil
	}
	held = &corev1.Secret{}
	if err := live.Get(ctx, key, held); err != nil {
		return nil, false, err
	}
	return held, Delivered(held, asm), nil
}

// create creates the delivered Secret name for asm holding item.
func create(ctx context.Context, c client.Client, asm *fleeetv1.Assemblage, name string, item Item) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: asm.Namespace, Name: name,
			Labels: map[string]string{fleeetv1.DeliveredLabel: "true"}},
		Type: item.Type,
		Data: item.Data,
	}
	if err := controllerutil.SetControllerReference(asm, secret, c.Scheme()); err != nil {
		return err
	}
	return c.Create(ctx, secret)
}

// Prune deletes the Secrets delivered for asm that are not in use. It
// lists through c, which may be a cache holding only delivered Secrets.
func Prune(ctx context.Context, c client.Client, asm *fleeetv1.Assemblage, inUse map[string]bool) ([]string, error) {
	held := &corev1.SecretList{}
	if err := c.List(ctx, held, client.InNamespace(asm.Namespace), client.MatchingLabels{fleeetv1.DeliveredLabel: "true"}); err != nil {
		return nil, fmt.Errorf("listing delivered Secrets: %w", err)
	}
	var pruned []string
	var errs []error
	for i := range held.Items {
		s := &held.Items[i]
		if inUse[s.Name] || !Delivered(s, asm) || !s.DeletionTimestamp.IsZero() {
			continue
		}
		uid := s.UID
		if err := c.Delete(ctx, s, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting delivered Secret %s/%s: %w", s.Namespace, s.Name, err))
			continue
		}
		pruned = append(pruned, s.Name)
	}
	return pruned, errors.Join(errs...)
}
