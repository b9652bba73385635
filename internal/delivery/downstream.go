package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Downstream, whoever delivers (the agent pulling, the manager pushing)
// and the agent's Assemblage controller, which deletes what no sync uses,
// never read a Secret of a tenant namespace: the agent chart grants no
// get, list or watch on Secrets there, so the apiserver itself keeps a
// tenant's own Secrets out of the agent's reach. What the fleet delivered
// is recorded instead on the Assemblage it was delivered for (Ledger), and
// a Secret that may be the tenant's is changed only by requests the
// apiserver carries out only when the Secret is the fleet's (Writer).

// Ledger is what an Assemblage's DeliveredSecretsAnnotation records: the
// Secrets the fleet delivered for it, by name, with the UID each was
// written with. Names only travel; never data.
type Ledger map[string]types.UID

// LedgerOf reads asm's ledger; an annotation that does not parse is an
// empty ledger (whoever delivers writes it again whole).
func LedgerOf(asm *fleeetv1.Assemblage) Ledger {
	l := Ledger{}
	_ = json.Unmarshal([]byte(asm.Annotations[fleeetv1.DeliveredSecretsAnnotation]), &l)
	return l
}

// encode is the annotation's value for l; empty for an empty ledger.
func (l Ledger) encode() string {
	if len(l) == 0 {
		return ""
	}
	raw, _ := json.Marshal(l) // a map of strings: cannot fail
	return string(raw)
}

// record writes l to asm's annotation on the apiserver when it differs
// from what asm holds, and takes the new resourceVersion and annotation
// into asm. Only the annotation is sent, with no resourceVersion: asm may
// be a plan assembled from several parts, which is not written back, and
// the Assemblage's status moves on under the writer all the time. Its two
// writers may race, one adding and one removing: a Secret left out of the
// ledger that way is written and recorded again by the next delivery (the
// Writer trusts its memory only of what the ledger names), and one left in
// it after its deletion is dropped by the next prune (not found).
func (l Ledger) record(ctx context.Context, c client.Client, asm *fleeetv1.Assemblage) error {
	value := l.encode()
	if asm.Annotations[fleeetv1.DeliveredSecretsAnnotation] == value {
		return nil
	}
	var annotation any
	if value != "" {
		annotation = value
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{fleeetv1.DeliveredSecretsAnnotation: annotation},
	}})
	stored := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Namespace: asm.Namespace, Name: asm.Name}}
	err := c.Patch(ctx, stored, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsForbidden(err) {
		// The push identity of a fleet-agent chart older than this
		// manager may update Assemblages but not patch them; what it
		// delivers into is the Assemblage it has just written whole.
		stored = asm.DeepCopy()
		metav1.SetMetaDataAnnotation(&stored.ObjectMeta, fleeetv1.DeliveredSecretsAnnotation, value)
		if value == "" {
			delete(stored.Annotations, fleeetv1.DeliveredSecretsAnnotation)
		}
		err = c.Update(ctx, stored)
	}
	if err != nil {
		return fmt.Errorf("recording the delivered Secrets on Assemblage %s/%s: %w", asm.Namespace, asm.Name, err)
	}
	asm.ResourceVersion, asm.Annotations = stored.ResourceVersion, stored.Annotations
	return nil
}

// RewriteAfter is how long a Writer trusts its memory of a Secret it
// wrote: past it, the next delivery writes it again, which puts back a
// delivered Secret someone changed or deleted in the meantime. Whoever
// delivers does so at least this often.
const RewriteAfter = 10 * time.Minute

// Writer writes delivered Secrets into tenant namespaces without reading
// any. It remembers a digest of what it last wrote, in memory only, so
// that delivering an unchanged plan sends nothing.
type Writer struct {
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu      sync.Mutex
	written map[writtenKey]written
	// swept is when written was last rid of what it no longer trusts.
	swept time.Time
}

// writtenKey names a delivered Secret by its Assemblage's UID, which tells
// apart the clusters one Writer may deliver into (the manager pushing).
type writtenKey struct {
	assemblage types.UID
	name       string
}

// written is a Writer's memory of one Secret.
type written struct {
	uid    types.UID
	digest [sha256.Size]byte
	at     time.Time
}

func (w *Writer) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// fresh reports whether the Secret key was written holding item, as uid,
// less than RewriteAfter ago.
func (w *Writer) fresh(key writtenKey, uid types.UID, item Item) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.written[key]
	return ok && m.uid == uid && m.digest == digest(item) && w.now().Sub(m.at) < RewriteAfter
}

// remember records that key was written holding item, as uid; an empty
// uid forgets key. Once every RewriteAfter it forgets what is older than
// that, which fresh no longer trusts: the Secrets of Assemblages since
// deleted, or no longer delivered, are not kept for ever.
func (w *Writer) remember(key writtenKey, uid types.UID, item Item) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if now.Sub(w.swept) >= RewriteAfter {
		maps.DeleteFunc(w.written, func(_ writtenKey, m written) bool { return now.Sub(m.at) >= RewriteAfter })
		w.swept = now
	}
	if uid == "" {
		delete(w.written, key)
		return
	}
	if w.written == nil {
		w.written = map[writtenKey]written{}
	}
	w.written[key] = written{uid: uid, digest: digest(item), at: now}
}

// digest identifies what item holds. It is kept in memory only.
func digest(item Item) [sha256.Size]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%q\n", item.Type)
	for _, k := range slices.Sorted(maps.Keys(item.Data)) {
		fmt.Fprintf(h, "%q %d\n", k, len(item.Data[k]))
		h.Write(item.Data[k])
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// Write writes each item as a Secret of the same name in asm's namespace,
// labelled as delivered and controlled by asm, so that it goes when the
// Assemblage does, and records them in asm's ledger. A Secret of that name
// that the fleet did not deliver for asm is neither read nor changed: its
// name is returned among the conflicts. A delivered Secret whose type
// changed is replaced (a Secret's type cannot be updated). Errors name
// Secrets, never data.
func (w *Writer) Write(ctx context.Context, c client.Client, asm *fleeetv1.Assemblage, items map[string]Item) (conflicts []string, err error) {
	ledger := LedgerOf(asm)
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(items)) {
		key := writtenKey{assemblage: asm.UID, name: name}
		if uid, ok := ledger[name]; ok && w.fresh(key, uid, items[name]) {
			continue
		}
		_, delivered := ledger[name]
		uid, err := put(ctx, c, asm, name, items[name], delivered)
		w.remember(key, uid, items[name])
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("delivering Secret %s/%s: %w", asm.Namespace, name, err))
		case uid == "":
			conflicts = append(conflicts, name)
			delete(ledger, name)
		default:
			ledger[name] = uid
		}
	}
	return conflicts, errors.Join(append(errs, ledger.record(ctx, c, asm))...)
}

// put writes item as the Secret name delivered for asm and returns its UID,
// or no UID when a Secret of that name is not the fleet's. It creates the
// Secret; one that exists is changed only through JSON patches whose tests
// the apiserver checks in the same request (the label and the controller
// reference that say the fleet delivered it for asm), so a Secret that is
// not ours is refused before anything of it is read or written. One the
// ledger names (delivered) most likely exists: it is patched first, and
// created only when it is gone.
func put(ctx context.Context, c client.Client, asm *fleeetv1.Assemblage, name string, item Item, delivered bool) (types.UID, error) {
	if !delivered {
		secret, err := create(ctx, c, asm, name, item)
		if !apierrors.IsAlreadyExists(err) {
			return secret.UID, err
		}
	}
	guard := []map[string]any{
		{"op": "test", "path": "/metadata/labels/" + pointerEscape(fleeetv1.DeliveredLabel), "value": "true"},
		{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": string(asm.UID)},
		{"op": "test", "path": "/metadata/ownerReferences/0/controller", "value": true},
	}
	update := append(slices.Clone(guard),
		map[string]any{"op": "test", "path": "/type", "value": string(item.Type)},
		map[string]any{"op": "add", "path": "/data", "value": item.Data})
	held := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: asm.Namespace, Name: name}}
	err := jsonPatch(ctx, c, held, update)
	if delivered && apierrors.IsNotFound(err) {
		return put(ctx, c, asm, name, item, false)
	}
	if apierrors.IsForbidden(err) {
		return putReading(ctx, c, asm, name, item)
	}
	if !failedTest(err) {
		return held.UID, err
	}
	// Not ours, or ours with another type: the guard alone tells which.
	if err := jsonPatch(ctx, c, held, guard); failedTest(err) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	if held.Type == item.Type {
		return "", fmt.Errorf("updating it was refused: %w", err)
	}
	return replace(ctx, c, asm, held, item)
}

// replace deletes held, a Secret the fleet delivered for asm whose type is
// not item's, if it is still the one read (its UID), and creates it again
// holding item; a Secret someone else created in between is theirs (no
// UID).
func replace(ctx context.Context, c client.Client, asm *fleeetv1.Assemblage, held *corev1.Secret, item Item) (types.UID, error) {
	uid := held.UID
	if err := c.Delete(ctx, held, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return "", err
	}
	secret, err := create(ctx, c, asm, held.Name, item)
	if apierrors.IsAlreadyExists(err) {
		return "", nil
	}
	return secret.UID, err
}

// putReading is put for an identity that may not patch Secrets but may
// read them: the push identity of a fleet-agent chart older than this
// manager, within the version skew the docs allow. It reads the Secret
// and updates it only when the fleet delivered it for asm, as that chart's
// manager did.
func putReading(ctx context.Context, c client.Client, asm *fleeetv1.Assemblage, name string, item Item) (types.UID, error) {
	held := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: asm.Namespace, Name: name}, held); err != nil {
		return "", err
	}
	switch {
	case held.Labels[fleeetv1.DeliveredLabel] != "true" || !metav1.IsControlledBy(held, asm):
		return "", nil
	case held.Type != item.Type:
		return replace(ctx, c, asm, held, item)
	}
	held.Data = item.Data
	return held.UID, c.Update(ctx, held)
}

// create creates the delivered Secret name for asm holding item.
func create(ctx context.Context, c client.Client, asm *fleeetv1.Assemblage, name string, item Item) (*corev1.Secret, error) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: asm.Namespace, Name: name,
			Labels: map[string]string{fleeetv1.DeliveredLabel: "true"}},
		Type: item.Type,
		Data: item.Data,
	}
	if err := controllerutil.SetControllerReference(asm, secret, c.Scheme()); err != nil {
		return secret, err
	}
	return secret, c.Create(ctx, secret)
}

// jsonPatch sends ops as a JSON patch of obj.
func jsonPatch(ctx context.Context, c client.Client, obj client.Object, ops []map[string]any) error {
	raw, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	return c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, raw))
}

// failedTest reports whether err may be the apiserver's answer to a JSON
// patch whose test failed or named a path the object lacks: 422, as a
// change the Secret's validation refuses is too, which put tells apart.
func failedTest(err error) bool {
	return apierrors.IsInvalid(err)
}

// pointerEscape escapes s as one JSON pointer token (RFC 6901).
func pointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// Prune deletes the Secrets asm's ledger records that inUse does not name,
// each only if it is still the Secret that was delivered (its UID), and
// records what is left. It returns the names deleted.
func Prune(ctx context.Context, c client.Client, asm *fleeetv1.Assemblage, inUse map[string]bool) ([]string, error) {
	ledger := LedgerOf(asm)
	var pruned []string
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(ledger)) {
		if inUse[name] {
			continue
		}
		uid := ledger[name]
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: asm.Namespace, Name: name}}
		err := c.Delete(ctx, secret, client.Preconditions{UID: &uid})
		switch {
		case err == nil:
			pruned = append(pruned, name)
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone, or replaced by a Secret that is not the one delivered.
		default:
			errs = append(errs, fmt.Errorf("deleting delivered Secret %s/%s: %w", asm.Namespace, name, err))
			continue
		}
		delete(ledger, name)
	}
	return pruned, errors.Join(append(errs, ledger.record(ctx, c, asm))...)
}
