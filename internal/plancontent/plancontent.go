// Package plancontent keeps compiled syncs out of plans: the CompiledSync a
// Module's compiled sync is stored in once, the plan entry that names it in
// place of the sync, and reading a plan's entries back whole.
package plancontent

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// hashLength is how many hex digits of the keyed hash a name carries: 80
// bits, beyond guessing.
const hashLength = 20

// Name is the name of the CompiledSync holding sync, compiled from the
// Module m: m's name and a hash of the sync keyed with m's UID. The same
// sync of the same Module always gets the same name, so every Remote it is
// placed on shares one CompiledSync; and since a cluster can read neither
// the Module nor its UID, it cannot work out the name of content its plan
// does not name, such as another variant of the Module's overrides.
func Name(m metav1.Object, sync *fleeetv1.NamedSync) string {
	raw, err := json.Marshal(sync)
	if err != nil { // the API types always encode
		panic(err)
	}
	mac := hmac.New(sha256.New, []byte(m.GetUID()))
	mac.Write(raw)
	return m.GetName() + "-" + hex.EncodeToString(mac.Sum(nil))[:hashLength]
}

// New is the CompiledSync named name holding sync, compiled from the
// Module m, in m's namespace.
func New(m metav1.Object, name string, sync *fleeetv1.NamedSync) *fleeetv1.CompiledSync {
	return &fleeetv1.CompiledSync{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.GetNamespace(),
			Labels: map[string]string{fleeetv1.SyncLabel: m.GetName()}},
		Sync: *sync.DeepCopy(),
	}
}

// Entry is the plan entry naming the CompiledSync content in place of
// sync: the sync's name, content, and the Secrets delivered for it, which
// the manager reads from plans to deliver them.
func Entry(sync *fleeetv1.NamedSync, content string) fleeetv1.NamedSync {
	return fleeetv1.NamedSync{Name: sync.Name, Content: content,
		SyncSpec: fleeetv1.SyncSpec{Secrets: sync.Secrets}}
}

// Getter reads a CompiledSync by name. What it returns may be shared with
// other readers: only read it.
type Getter func(ctx context.Context, name string) (*fleeetv1.CompiledSync, error)

// From reads CompiledSyncs of namespace through r. From a cache, what it
// returns is the cache's own copy: only read it (Resolve copies the sync).
func From(r client.Reader, namespace string) Getter {
	return func(ctx context.Context, name string) (*fleeetv1.CompiledSync, error) {
		cs := &fleeetv1.CompiledSync{}
		return cs, r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cs, client.UnsafeDisableDeepCopy)
	}
}

// Resolve returns syncs with each entry that names a CompiledSync replaced
// by the sync it holds, read through get; syncs itself, not copied, when
// no entry names one. A CompiledSync that holds another sync than the
// entry's is an error: the plan and its content disagree.
func Resolve(ctx context.Context, syncs []fleeetv1.NamedSync, get Getter) ([]fleeetv1.NamedSync, error) {
	if !Names(syncs) {
		return syncs, nil
	}
	out := make([]fleeetv1.NamedSync, len(syncs))
	for i := range syncs {
		if syncs[i].Content == "" {
			out[i] = *syncs[i].DeepCopy()
			continue
		}
		cs, err := get(ctx, syncs[i].Content)
		if err != nil {
			return nil, fmt.Errorf("reading CompiledSync %s of sync %s: %w", syncs[i].Content, syncs[i].Name, err)
		}
		if cs.Sync.Name != syncs[i].Name || cs.Sync.Content != "" {
			return nil, fmt.Errorf("CompiledSync %s holds sync %q, not %q", syncs[i].Content, cs.Sync.Name, syncs[i].Name)
		}
		out[i] = *cs.Sync.DeepCopy()
	}
	return out, nil
}

// Names reports whether any of syncs names a CompiledSync.
func Names(syncs []fleeetv1.NamedSync) bool {
	for i := range syncs {
		if syncs[i].Content != "" {
			return true
		}
	}
	return false
}

// ResolvePlan returns plan with every part's syncs resolved (Resolve),
// reading CompiledSyncs through get: a part that names none is returned as
// it is (a nil part stays nil), the others are copies, so that plan itself
// stays as read. An error names the part, and nothing of the plan may be
// acted on then.
func ResolvePlan(ctx context.Context, plan fleeetv1.ProxyPlan, get Getter) (fleeetv1.ProxyPlan, error) {
	out := make(fleeetv1.ProxyPlan, len(plan))
	for k, pa := range plan {
		if pa == nil || !Names(pa.Spec.Assemblage.Syncs) {
			out[k] = pa
			continue
		}
		syncs, err := Resolve(ctx, pa.Spec.Assemblage.Syncs, get)
		if err != nil {
			return nil, fmt.Errorf("ProxyAssemblage %s: %w", pa.Name, err)
		}
		// A part naming CompiledSyncs is small to copy: its entries are
		// names and Secrets.
		resolved := pa.DeepCopy()
		resolved.Spec.Assemblage.Syncs = syncs
		out[k] = resolved
	}
	return out, nil
}

// ResolveAll resolves every plan of namespace in plans (keyed by Remote)
// in place, listing the namespace's CompiledSyncs once through r.
func ResolveAll(ctx context.Context, r client.Reader, namespace string, plans map[string]fleeetv1.ProxyPlan) error {
	named := false
	for _, plan := range plans {
		for _, pa := range plan {
			named = named || (pa != nil && Names(pa.Spec.Assemblage.Syncs))
		}
	}
	if !named {
		return nil
	}
	list := &fleeetv1.CompiledSyncList{}
	if err := r.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("listing CompiledSyncs: %w", err)
	}
	byName := make(map[string]*fleeetv1.CompiledSync, len(list.Items))
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	get := func(_ context.Context, name string) (*fleeetv1.CompiledSync, error) {
		if cs, ok := byName[name]; ok {
			return cs, nil
		}
		return nil, apierrors.NewNotFound(fleeetv1.GroupVersion.WithResource("compiledsyncs").GroupResource(), name)
	}
	for remote, plan := range plans {
		resolved, err := ResolvePlan(ctx, plan, get)
		if err != nil {
			return fmt.Errorf("plan of Remote %s: %w", remote, err)
		}
		plans[remote] = resolved
	}
	return nil
}

// Lagging reads from Cache, and from Live what Cache has not seen yet: a
// CompiledSync created a moment before the plan that names it.
type Lagging struct {
	Cache client.Reader
	// Live is nil to read Cache alone.
	Live client.Reader
}

// Get implements client.Reader.
func (l Lagging) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := l.Cache.Get(ctx, key, obj, opts...)
	if apierrors.IsNotFound(err) && l.Live != nil {
		err = l.Live.Get(ctx, key, obj, opts...)
	}
	return err
}

// List implements client.Reader, from Cache.
func (l Lagging) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return l.Cache.List(ctx, list, opts...)
}

// Mark sets cs's UnreferencedAnnotation to since, or removes it when since
// is empty, with a merge patch that changes nothing else.
func Mark(ctx context.Context, w client.Writer, cs *fleeetv1.CompiledSync, since string) error {
	value := "null"
	if since != "" {
		value = strconv.Quote(since)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+fleeetv1.UnreferencedAnnotation+`":`+value+`}}}`))
	return w.Patch(ctx, cs, patch)
}
