// Package plancontent keeps what Remotes share out of their plans: the
// CompiledSync a Module's compiled sync is stored in once, the plan entry
// that names it in place of the sync, the CompiledPlan holding the entries
// and stamps plan parts have in common, and reading a plan back whole.
package plancontent

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

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

// NewPlan is the CompiledPlan of namespace holding entries, each a bare
// reference to a CompiledSync sorted by name, and the stamps compiled,
// named by a hash of both (PlanName).
func NewPlan(namespace string, entries []fleeetv1.NamedSync, compiled map[string]fleeetv1.Compiled) *fleeetv1.CompiledPlan {
	cp := &fleeetv1.CompiledPlan{ObjectMeta: metav1.ObjectMeta{Namespace: namespace},
		Spec: fleeetv1.CompiledPlanSpec{Entries: slices.Clone(entries), Compiled: maps.Clone(compiled)}}
	cp.Name = PlanName(cp)
	return cp
}

// PlanName is the name of the CompiledPlan holding cp's entries and stamps:
// "plan-" and a hash of both. The entries name CompiledSyncs, whose names
// cannot be worked out without their Modules' UIDs, so neither can this.
func PlanName(cp *fleeetv1.CompiledPlan) string {
	raw, err := json.Marshal(cp.Spec)
	if err != nil { // the API types always encode
		panic(err)
	}
	sum := sha256.Sum256(raw)
	return "plan-" + hex.EncodeToString(sum[:])[:hashLength]
}

// Entry is the plan entry naming the CompiledSync content in place of
// sync: the sync's name, content, and the Secrets delivered for it, which
// the manager reads from plans to deliver them.
func Entry(sync *fleeetv1.NamedSync, content string) fleeetv1.NamedSync {
	return fleeetv1.NamedSync{Name: sync.Name, Content: content,
		SyncSpec: fleeetv1.SyncSpec{Secrets: sync.Secrets}}
}

// Store reads CompiledSyncs and CompiledPlans by name. What it returns
// may be shared with other readers: only read it.
type Store interface {
	CompiledSync(ctx context.Context, name string) (*fleeetv1.CompiledSync, error)
	CompiledPlan(ctx context.Context, name string) (*fleeetv1.CompiledPlan, error)
}

// From reads CompiledSyncs and CompiledPlans of namespace through r. From a
// cache, what it returns is the cache's own copy: only read it (Resolve
// copies the syncs).
func From(r client.Reader, namespace string) Store {
	return reader{r: r, namespace: namespace}
}

type reader struct {
	r         client.Reader
	namespace string
}

func (r reader) CompiledSync(ctx context.Context, name string) (*fleeetv1.CompiledSync, error) {
	cs := &fleeetv1.CompiledSync{}
	return cs, r.r.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: name}, cs, client.UnsafeDisableDeepCopy)
}

func (r reader) CompiledPlan(ctx context.Context, name string) (*fleeetv1.CompiledPlan, error) {
	cp := &fleeetv1.CompiledPlan{}
	return cp, r.r.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: name}, cp, client.UnsafeDisableDeepCopy)
}

// Resolve returns syncs with each entry that names a CompiledSync replaced
// by the sync it holds, read through store; syncs itself, not copied, when
// no entry names one. A CompiledSync that holds another sync than the
// entry's is an error: the plan and its content disagree.
func Resolve(ctx context.Context, syncs []fleeetv1.NamedSync, store Store) ([]fleeetv1.NamedSync, error) {
	if !Names(syncs) {
		return syncs, nil
	}
	out := make([]fleeetv1.NamedSync, len(syncs))
	for i := range syncs {
		if syncs[i].Content == "" {
			out[i] = *syncs[i].DeepCopy()
			continue
		}
		cs, err := store.CompiledSync(ctx, syncs[i].Content)
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

// Entries returns the entries of the plan part pa, read through store: its
// own and those of the CompiledPlan it names, sorted by name; pa's own, not
// copied, when it names none. A CompiledPlan whose entries are not each a
// bare reference to a CompiledSync, or that repeats one of pa's, is an
// error: only the compiler writes such parts.
func Entries(ctx context.Context, pa *fleeetv1.ProxyAssemblage, store Store) ([]fleeetv1.NamedSync, error) {
	own := pa.Spec.Assemblage.Syncs
	if pa.Spec.CompiledPlan == "" {
		return own, nil
	}
	cp, err := store.CompiledPlan(ctx, pa.Spec.CompiledPlan)
	if err != nil {
		return nil, fmt.Errorf("reading CompiledPlan %s: %w", pa.Spec.CompiledPlan, err)
	}
	out := make([]fleeetv1.NamedSync, 0, len(own)+len(cp.Spec.Entries))
	out = append(out, own...)
	for i := range cp.Spec.Entries {
		e := &cp.Spec.Entries[i]
		if !bareReference(e) {
			return nil, fmt.Errorf("CompiledPlan %s: entry %q is not a reference to a CompiledSync", cp.Name, e.Name)
		}
		if slices.ContainsFunc(own, func(s fleeetv1.NamedSync) bool { return s.Name == e.Name }) {
			return nil, fmt.Errorf("CompiledPlan %s: entry %q is also in the plan", cp.Name, e.Name)
		}
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b fleeetv1.NamedSync) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// bareReference reports whether e names a CompiledSync and says nothing
// else: no labels, no Secrets, nothing of a sync. Every reader of a plan
// checks every entry of its CompiledPlan, so this is a check of fields,
// not a comparison with Entry's.
func bareReference(e *fleeetv1.NamedSync) bool {
	return e.Content != "" && len(e.Labels) == 0 && reflect.ValueOf(e.SyncSpec).IsZero()
}

// Stamps returns the compiler's stamps on the plan part pa: those of the
// CompiledPlan its CompiledPlanAnnotation names, read through store, or of
// its CompiledAnnotation. A part with neither has none.
func Stamps(ctx context.Context, pa *fleeetv1.ProxyAssemblage, store Store) (map[string]fleeetv1.Compiled, error) {
	name := pa.Annotations[fleeetv1.CompiledPlanAnnotation]
	if name == "" {
		return pa.CompiledSyncs(), nil
	}
	cp, err := store.CompiledPlan(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reading CompiledPlan %s: %w", name, err)
	}
	return cp.Spec.Compiled, nil
}

// ResolvePlan returns plan with every part's syncs resolved (Entries, then
// Resolve), reading through store: a part that names nothing is returned
// as it is (a nil part stays nil), the others are copies without the
// CompiledPlan they named, so that plan itself stays as read. An error names
// the part, and nothing of the plan may be acted on then.
func ResolvePlan(ctx context.Context, plan fleeetv1.ProxyPlan, store Store) (fleeetv1.ProxyPlan, error) {
	out := make(fleeetv1.ProxyPlan, len(plan))
	for k, pa := range plan {
		if pa == nil || (pa.Spec.CompiledPlan == "" && !Names(pa.Spec.Assemblage.Syncs)) {
			out[k] = pa
			continue
		}
		entries, err := Entries(ctx, pa, store)
		if err == nil {
			entries, err = Resolve(ctx, entries, store)
		}
		if err != nil {
			return nil, fmt.Errorf("ProxyAssemblage %s: %w", pa.Name, err)
		}
		// A part naming CompiledSyncs is small to copy: its entries are
		// names and Secrets.
		resolved := pa.DeepCopy()
		resolved.Spec.Assemblage.Syncs = entries
		resolved.Spec.CompiledPlan = ""
		out[k] = resolved
	}
	return out, nil
}

// ResolveAll resolves every plan of namespace in plans (keyed by Remote)
// in place, listing the namespace's CompiledSyncs and CompiledPlans once
// through r.
func ResolveAll(ctx context.Context, r client.Reader, namespace string, plans map[string]fleeetv1.ProxyPlan) error {
	named := false
	for _, plan := range plans {
		for _, pa := range plan {
			named = named || (pa != nil && (pa.Spec.CompiledPlan != "" || Names(pa.Spec.Assemblage.Syncs)))
		}
	}
	if !named {
		return nil
	}
	syncs := &fleeetv1.CompiledSyncList{}
	if err := r.List(ctx, syncs, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("listing CompiledSyncs: %w", err)
	}
	cplans := &fleeetv1.CompiledPlanList{}
	if err := r.List(ctx, cplans, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("listing CompiledPlans: %w", err)
	}
	listed := Objects{Syncs: map[string]*fleeetv1.CompiledSync{}, Plans: map[string]*fleeetv1.CompiledPlan{}}
	for i := range syncs.Items {
		listed.Syncs[syncs.Items[i].Name] = &syncs.Items[i]
	}
	for i := range cplans.Items {
		listed.Plans[cplans.Items[i].Name] = &cplans.Items[i]
	}
	for remote, plan := range plans {
		resolved, err := ResolvePlan(ctx, plan, listed)
		if err != nil {
			return fmt.Errorf("plan of Remote %s: %w", remote, err)
		}
		plans[remote] = resolved
	}
	return nil
}

// Objects is a Store of objects held in memory, by name: those a List
// returned, or a test's.
type Objects struct {
	Syncs map[string]*fleeetv1.CompiledSync
	Plans map[string]*fleeetv1.CompiledPlan
}

// CompiledSync implements Store.
func (o Objects) CompiledSync(_ context.Context, name string) (*fleeetv1.CompiledSync, error) {
	if cs, ok := o.Syncs[name]; ok {
		return cs, nil
	}
	return nil, apierrors.NewNotFound(fleeetv1.GroupVersion.WithResource("compiledsyncs").GroupResource(), name)
}

// CompiledPlan implements Store.
func (o Objects) CompiledPlan(_ context.Context, name string) (*fleeetv1.CompiledPlan, error) {
	if cp, ok := o.Plans[name]; ok {
		return cp, nil
	}
	return nil, apierrors.NewNotFound(fleeetv1.GroupVersion.WithResource("compiledplans").GroupResource(), name)
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

// Mark sets the UnreferencedAnnotation of o, a CompiledSync or
// CompiledPlan, to since, or removes it when since is empty, with a merge
// patch that changes nothing else.
func Mark(ctx context.Context, w client.Writer, o client.Object, since string) error {
	value := "null"
	if since != "" {
		value = strconv.Quote(since)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+fleeetv1.UnreferencedAnnotation+`":`+value+`}}}`))
	return w.Patch(ctx, o, patch)
}
