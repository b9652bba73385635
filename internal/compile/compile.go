// Package compile turns Modules into the syncs of a Remote's
// ProxyAssemblage: which Modules select a Remote, each Module's sync with its
// control-plane bindings resolved for that Remote, and which version the
// rollout lets the Remote hold. Both manager controllers use it, so the plan
// the compiler writes and the rollout the Module controller drives agree.
package compile

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/bindings"
)

// Selects reports whether a Module's or BootstrapModule's selector selects a
// Remote: an absent selector selects none, {} selects all.
func Selects(selector *metav1.LabelSelector, r *fleeetv1.Remote) (bool, error) {
	if selector == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return false, fmt.Errorf("spec.selector: %w", err)
	}
	return sel.Matches(labels.Set(r.Labels)), nil
}

// Sync compiles the sync a Module or BootstrapModule (owner, with placement
// p) places on one Remote: named after the owner, carrying its labels, with
// the overrides that pick the Remote applied (override) and every $(NAME) of
// a control-plane binding substituted. Mentions of other names are left for
// the agent's bindings; the substituted values and $$( escapes are written
// so that the agent's expansion yields them literally (bindings.ExpandEarly).
func Sync(ctx context.Context, reader client.Reader, owner metav1.Object, p *fleeetv1.SyncPlacement, r *fleeetv1.Remote) (fleeetv1.NamedSync, error) {
	values, err := resolve(ctx, reader, owner.GetNamespace(), p.ControlPlaneBindings, r)
	if err != nil {
		return fleeetv1.NamedSync{}, err
	}
	spec := *p.Sync.DeepCopy()
	merged, err := override(&spec, p.Overrides, r)
	if err != nil {
		return fleeetv1.NamedSync{}, err
	}
	if k := spec.Package.Kustomize; k != nil {
		for key, v := range k.Substitute {
			k.Substitute[key] = bindings.ExpandEarly(v, values)
		}
	}
	if h := spec.Package.Helm; h != nil && merged != nil {
		raw, err := json.Marshal(bindings.ExpandLeavesEarly(merged, values))
		if err != nil {
			return fleeetv1.NamedSync{}, err
		}
		h.Values = &apiextensionsv1.JSON{Raw: raw}
	} else if h != nil && h.Values != nil && len(h.Values.Raw) > 0 {
		raw, err := bindings.ExpandJSONEarly(h.Values.Raw, values)
		if err != nil {
			return fleeetv1.NamedSync{}, fmt.Errorf("spec.sync.package.helm.values: %w", err)
		}
		h.Values.Raw = raw
	}
	for i := range spec.Bindings {
		if v := spec.Bindings[i].Value; v != nil {
			expanded := bindings.ExpandEarly(*v, values)
			spec.Bindings[i].Value = &expanded
		}
	}
	var lbls map[string]string
	if len(owner.GetLabels()) > 0 { // nil, not empty: the stored plan omits empty maps
		lbls = maps.Clone(owner.GetLabels())
	}
	return fleeetv1.NamedSync{Name: owner.GetName(), Labels: lbls, SyncSpec: spec}, nil
}

// resolve evaluates control-plane bindings for one Remote, reading
// ConfigMaps from namespace. A literal value is expanded in full against the
// bindings before it: what it yields is the binding's final, literal text.
// An unresolved binding is a *bindings.Error.
func resolve(ctx context.Context, reader client.Reader, namespace string, cpBindings []fleeetv1.ControlPlaneBinding, r *fleeetv1.Remote) (map[string]string, error) {
	list := make([]bindings.Binding, len(cpBindings))
	for i, b := range cpBindings {
		list[i] = bindings.Binding{Path: fmt.Sprintf("spec.controlPlaneBindings[%s]", b.Name), Name: b.Name, Value: b.Value}
		if ref := b.ObjectFieldRef; ref != nil {
			list[i].Field = ref.FieldPath
			list[i].Read = func() (any, string, error) { return readControlPlane(ctx, reader, namespace, ref, r) }
		}
	}
	return bindings.Resolve(list)
}

// readControlPlane reads what a control-plane binding names: the Remote
// itself, or a ConfigMap of namespace; never a Secret.
func readControlPlane(ctx context.Context, reader client.Reader, namespace string, ref *fleeetv1.ControlPlaneFieldRef, r *fleeetv1.Remote) (any, string, error) {
	var obj any = r
	switch ref.Kind {
	case "Remote":
	case "ConfigMap":
		cm := &corev1.ConfigMap{}
		if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, cm); err != nil {
			return nil, "", fmt.Errorf("reading ConfigMap %s: %w", ref.Name, err)
		}
		obj = cm
	default:
		return nil, "", fmt.Errorf("objectFieldRef.kind %q is not Remote or ConfigMap; Secrets are never read in the management cluster", ref.Kind)
	}
	doc, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, "", err
	}
	return doc, ref.Kind + " " + refName(ref, r), nil
}

func refName(ref *fleeetv1.ControlPlaneFieldRef, r *fleeetv1.Remote) string {
	if ref.Kind == "Remote" {
		return r.Name
	}
	return ref.Name
}

// Find returns the sync called name, or nil.
func Find(syncs []fleeetv1.NamedSync, name string) *fleeetv1.NamedSync {
	i := slices.IndexFunc(syncs, func(s fleeetv1.NamedSync) bool { return s.Name == name })
	if i < 0 {
		return nil
	}
	return &syncs[i]
}

// Same reports whether two compiled syncs are the same version of a sync.
func Same(a, b *fleeetv1.NamedSync) bool {
	return a != nil && b != nil && equality.Semantic.DeepEqual(a, b)
}

// Choose picks the sync a Remote holds for a Module whose revision compiles
// to desired: the new one when the Remote has none yet, already holds it, or
// the rollout admits the Remote; otherwise it keeps what it holds, so a
// Remote never moves to a version before its turn and never moves backward.
func Choose(m *fleeetv1.Module, remote, revision string, current, desired *fleeetv1.NamedSync) *fleeetv1.NamedSync {
	if current == nil || m.Spec.Rollout.Strategy != fleeetv1.RollingUpdateStrategy || Same(current, desired) {
		return desired
	}
	if ro := m.Status.Rollout; ro != nil && ro.Revision == revision && slices.Contains(ro.Admitted, remote) {
		return desired
	}
	return current
}

// ChooseBack picks the sync a Remote holds while its Module is rolled back:
// a Remote holding the failed version (failed) or nothing goes to the
// version rolled back to (back); one holding anything else keeps it, so a
// rollback never moves a Remote forward.
func ChooseBack(current, failed, back *fleeetv1.NamedSync) *fleeetv1.NamedSync {
	if current == nil || Same(current, failed) {
		return back
	}
	return current
}

// Revision identifies what a Module rolls out, apart from how: a hash of its
// sync, its control-plane bindings and its overrides. A Module without
// overrides keeps the revision it had before overrides existed.
func Revision(sync *fleeetv1.SyncSpec, cpBindings []fleeetv1.ControlPlaneBinding, overrides []fleeetv1.Override) string {
	raw, err := json.Marshal(struct {
		Sync      *fleeetv1.SyncSpec             `json:"sync"`
		Bindings  []fleeetv1.ControlPlaneBinding `json:"bindings,omitempty"`
		Overrides []fleeetv1.Override            `json:"overrides,omitempty"`
	}{sync, cpBindings, overrides})
	if err != nil { // the API types always encode
		panic(err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:5])
}

// ModuleRevision is the revision of a Module's spec.
func ModuleRevision(m *fleeetv1.Module) string {
	return Revision(&m.Spec.Sync, m.Spec.ControlPlaneBindings, m.Spec.Overrides)
}

// RolledBackTo returns the record of the version a Module's current
// revision was rolled back to, or nil when it was not.
func RolledBackTo(m *fleeetv1.Module, revision string) *fleeetv1.RolloutRecord {
	ro := m.Status.Rollout
	if ro == nil || ro.Revision != revision || ro.RolledBack == nil {
		return nil
	}
	for i := range m.Status.History {
		if h := &m.Status.History[i]; h.Revision == ro.RolledBack.To {
			return h
		}
	}
	return nil
}

// Version renders the exact version a sync pins: its git tag or commit, its
// chart version, or its OCI artifact's tag or digest.
func Version(s *fleeetv1.SyncSpec) string {
	switch {
	case s.Source.Git != nil && s.Source.Git.Tag != "":
		return s.Source.Git.Tag
	case s.Source.Git != nil:
		return s.Source.Git.Revision
	case s.Source.Helm != nil:
		return s.Source.Helm.Version
	case s.Source.OCI != nil:
		return cmp.Or(s.Source.OCI.Tag, s.Source.OCI.Digest)
	}
	return ""
}

// Limit is what a plan must fit in: MaxParts objects at most (zero: one),
// each within MaxBytes as admission measures a ProxyAssemblage spec
// (PlanBytes) and MaxSyncs syncs, with RetryRequestedAt the retry token
// every part carries beside its syncs. Zero MaxBytes or MaxSyncs: no limit
// of that kind.
type Limit struct {
	MaxBytes         int
	MaxSyncs         int
	MaxParts         int
	RetryRequestedAt string
}

// Parts is a plan split over several objects (fleeetv1.PlanPartName):
// Parts[k] are the syncs of part k, sorted by name, each sync in one part.
// A plan held in one object is Parts of one.
type Parts [][]fleeetv1.NamedSync

// Union is every sync of the plan, sorted by name: part 0's own syncs
// when the plan is one part, to be read only.
func (p Parts) Union() []fleeetv1.NamedSync {
	if len(p) == 1 {
		return p[0]
	}
	syncs := slices.Concat(p...)
	slices.SortFunc(syncs, func(a, b fleeetv1.NamedSync) int { return strings.Compare(a.Name, b.Name) })
	return syncs
}

// ReadPlan reads every part the plan of the Remote key may be split over
// (fleeetv1.PlanPartName), part 0 first, a nil entry for a part that does
// not exist: those part 0 lists, and any it no longer lists that are not
// deleted yet. The compiler compiles against it and the delivery
// controller bundles the Secrets it delivers.
func ReadPlan(ctx context.Context, c client.Reader, key client.ObjectKey) (fleeetv1.ProxyPlan, error) {
	plan := make(fleeetv1.ProxyPlan, fleeetv1.MaxPlanParts)
	for k, name := range fleeetv1.PlanPartNames(key.Name) {
		pa := &fleeetv1.ProxyAssemblage{}
		err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, pa)
		if client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		if err == nil {
			plan[k] = pa
		}
	}
	return plan, nil
}

// Held is what a Remote holds of plan, the parts of its ProxyAssemblages
// (a nil entry for one not read): the syncs of part 0 and of each further
// part part 0 lists, a listed part not read holding none.
func Held(plan fleeetv1.ProxyPlan) Parts {
	if len(plan) == 0 || plan[0] == nil {
		return nil
	}
	parts := Parts{plan[0].Spec.Assemblage.Syncs}
	for k := 1; k <= len(plan[0].Spec.Assemblage.Parts); k++ {
		var syncs []fleeetv1.NamedSync
		if k < len(plan) && plan[k] != nil {
			syncs = plan[k].Spec.Assemblage.Syncs
		}
		parts = append(parts, syncs)
	}
	return parts
}

// PartRevision is the revision of a further part holding syncs with the
// retry token retry (AssemblageSpec.PartRevision): a short hash of both,
// so that it changes whenever the part does.
func PartRevision(syncs []fleeetv1.NamedSync, retry string) string {
	raw, err := json.Marshal(struct {
		Syncs []fleeetv1.NamedSync `json:"syncs"`
		Retry string               `json:"retry"`
	}{syncs, retry})
	if err != nil { // the API types always encode
		panic(err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:partRevisionBytes])
}

// partRevisionBytes is how much of the hash a PartRevision keeps.
const partRevisionBytes = 8

// Plan computes the syncs of one Remote from modules (those of its
// namespace; the ones not selecting it are skipped), given what its plan
// holds now (current, part by part), and stamps each selecting Module's
// sync with what it compiled to (see fleeetv1.Compiled). A Module that is
// suspended, or whose bindings cannot be resolved for this Remote, keeps
// what the Remote holds (the stamp says why); otherwise the rollout decides
// (Choose, ChooseBack). The plan is split over parts within limit (Place):
// a sync stays in the part holding it while it fits there. When the plan
// would not fit in limit.MaxParts parts, the Modules whose changes do not
// fit keep what the Remote holds too, stamped TooLarge, and the rest go
// through. A sync that depends on a Module left out stays in the plan: the
// agent holds it back as Blocked, naming the missing dependency, and
// leaving it out as well would only spread one Module's size to others.
// Empty trailing parts are dropped. modules are only read; revisions, when
// not nil, remembers their revisions. The error joins failures other than
// bindings'.
func Plan(ctx context.Context, reader client.Reader, modules []fleeetv1.Module, remote *fleeetv1.Remote, current Parts,
	limit Limit, revisions *Revisions) (Parts, map[string]fleeetv1.Compiled, error) {
	var picks []pick
	stamps := map[string]fleeetv1.Compiled{}
	var errs []error
	part := map[string]int{}
	for k, syncs := range current {
		for _, s := range syncs {
			part[s.Name] = k
		}
	}
	union := current.Union()
	for i := range modules {
		m := &modules[i]
		selected, err := Selects(m.Spec.Selector, remote)
		if err != nil || !selected {
			continue // the Module controller reports an invalid selector
		}
		held := Find(union, m.Name)
		revision := revisions.Of(m)
		stamp := fleeetv1.Compiled{Generation: m.Generation, Revision: revision}
		desired, chosen, err := choose(ctx, reader, m, revision, remote, held, &stamp)
		if err != nil {
			if be := (*bindings.Error)(nil); !errors.As(err, &be) {
				errs = append(errs, err)
			}
			stamp.BindingError = err.Error()
		}
		stamp.Pending = err != nil || !Same(chosen, desired)
		stamps[m.Name] = stamp
		picks = append(picks, pick{module: m, held: held, chosen: chosen, part: part[m.Name]})
	}
	placed := limit.place(picks)
	for name, over := range placed.LeftOut {
		i := slices.IndexFunc(picks, func(p pick) bool { return p.module.Name == name })
		picks[i].chosen = picks[i].held
		stamp := stamps[name]
		stamp.Pending = true
		stamp.TooLarge = limit.tooLarge(remote.Name, over)
		stamps[name] = stamp
	}
	var parts Parts
	for _, p := range picks {
		if p.chosen == nil {
			continue
		}
		k := placed.Part[p.module.Name]
		for len(parts) <= k {
			parts = append(parts, nil)
		}
		parts[k] = append(parts[k], *p.chosen)
	}
	for _, syncs := range parts {
		slices.SortFunc(syncs, func(a, b fleeetv1.NamedSync) int { return strings.Compare(a.Name, b.Name) })
	}
	return parts, stamps, errors.Join(errs...)
}

// pick is what Plan chose for one Module: what the Remote holds of it, in
// which part, and what it holds next.
type pick struct {
	module       *fleeetv1.Module
	held, chosen *fleeetv1.NamedSync
	part         int
}

// changes reports whether the pick changes what the Remote holds.
func (p pick) changes() bool {
	return !Same(p.held, p.chosen) && (p.held != nil || p.chosen != nil)
}

// place decides the part of each chosen sync of picks and the Modules whose
// change the plan leaves out to stay within the limit (Place). A plan held
// in one object that does not change is not measured; one that fits one
// object is measured once and put in part 0; one that does not change
// keeps its parts.
func (l Limit) place(picks []pick) Placement {
	placed := Placement{Part: map[string]int{}}
	changes := slices.ContainsFunc(picks, pick.changes)
	if l.MaxBytes <= 0 && l.MaxSyncs <= 0 || !changes && !slices.ContainsFunc(picks, func(p pick) bool { return p.part > 0 }) {
		return placed // every sync in part 0
	}
	spec := fleeetv1.ProxyAssemblageSpec{Assemblage: fleeetv1.AssemblageSpec{RetryRequestedAt: l.RetryRequestedAt}}
	for _, p := range picks {
		if p.chosen != nil {
			spec.Assemblage.Syncs = append(spec.Assemblage.Syncs, *p.chosen)
		}
	}
	n := len(spec.Assemblage.Syncs)
	maxBytes, maxSyncs := cmp.Or(max(l.MaxBytes, 0), math.MaxInt), cmp.Or(max(l.MaxSyncs, 0), math.MaxInt)
	if n == 0 || n <= maxSyncs && (planBytesBound(&spec) <= maxBytes || PlanBytes(&spec) <= maxBytes) {
		return placed // one object: every sync in part 0
	}
	if !changes {
		for _, p := range picks {
			placed.Part[p.module.Name] = p.part
		}
		return placed
	}
	layout := l.layout(&spec.Assemblage.Syncs[0])
	var kept, changed []Change
	sizeOf := func(s *fleeetv1.NamedSync) int {
		if s == nil {
			return 0
		}
		return syncBytes(s)
	}
	for _, p := range picks {
		c := Change{Name: p.module.Name, Created: p.module.CreationTimestamp.Time, Held: sizeOf(p.held), Part: p.part}
		if !p.changes() {
			c.Next = c.Held
			kept = append(kept, c)
			continue
		}
		c.Next = sizeOf(p.chosen)
		changed = append(changed, c)
	}
	return Place(layout, maxBytes, maxSyncs, kept, changed)
}

// layout measures the shapes of a plan within l, first being one of its
// syncs: one object, or part 0 listing every further part's revision and
// the further parts carrying theirs.
func (l Limit) layout(first *fleeetv1.NamedSync) Layout {
	shape := func(a fleeetv1.AssemblageSpec) PlanShape {
		a.RetryRequestedAt = l.RetryRequestedAt
		spec := fleeetv1.ProxyAssemblageSpec{Assemblage: a}
		s := PlanShape{Empty: PlanBytes(&spec)}
		spec.Assemblage.Syncs = []fleeetv1.NamedSync{*first}
		s.Array = PlanBytes(&spec) - s.Empty - syncBytes(first) - 1
		return s
	}
	revision := strings.Repeat("0", 2*partRevisionBytes)
	layout := Layout{Single: shape(fleeetv1.AssemblageSpec{}), Parts: []PlanShape{}}
	if parts := max(l.MaxParts, 1); parts == 1 {
		layout.Parts = []PlanShape{layout.Single}
	} else {
		layout.Parts = append(layout.Parts, shape(fleeetv1.AssemblageSpec{Parts: slices.Repeat([]string{revision}, parts-1)}))
		further := shape(fleeetv1.AssemblageSpec{PartRevision: revision})
		layout.Parts = append(layout.Parts, slices.Repeat([]PlanShape{further}, parts-1)...)
	}
	return layout
}

// tooLarge says why a Module's change was left out of a Remote's plan:
// its sync too large for a part alone, the count of syncs, or else the
// size.
func (l Limit) tooLarge(remote string, over Overflow) string {
	parts := max(l.MaxParts, 1)
	switch {
	case l.MaxBytes > 0 && over.Alone > l.MaxBytes:
		return fmt.Sprintf("left out of the plan of Remote %s: its sync alone makes a part of %d bytes, over the %d-byte limit (--max-plan-bytes)",
			remote, over.Alone, l.MaxBytes)
	case l.MaxSyncs > 0 && over.Syncs > parts*l.MaxSyncs:
		return fmt.Sprintf("left out of the plan of Remote %s: with it the plan would hold %d syncs, over the %d its %d part(s) of %d syncs hold (as many as a cluster's Assemblage holds)",
			remote, over.Syncs, parts*l.MaxSyncs, parts, l.MaxSyncs)
	}
	return fmt.Sprintf("left out of the plan of Remote %s: with it the plan would be %d bytes, and none of its %d part(s) of at most %d bytes (--max-plan-bytes) has room for it",
		remote, over.Bytes, parts, l.MaxBytes)
}

// choose compiles what a Module's revision, or the version a rollback
// returns to, places on a Remote (desired, with stamp.Revision naming it) and
// picks what the Remote holds: held while the Module is suspended or cannot
// be compiled, else what the rollout allows.
func choose(ctx context.Context, reader client.Reader, m *fleeetv1.Module, revision string, remote *fleeetv1.Remote,
	held *fleeetv1.NamedSync, stamp *fleeetv1.Compiled) (desired, chosen *fleeetv1.NamedSync, err error) {
	next, err := Sync(ctx, reader, m, &m.Spec.SyncPlacement, remote)
	if err != nil {
		return nil, held, err
	}
	desired, chosen = &next, Choose(m, remote.Name, revision, held, &next)
	if record := RolledBackTo(m, revision); record != nil {
		back, err := Sync(ctx, reader, m, &fleeetv1.SyncPlacement{Sync: record.Sync,
			ControlPlaneBindings: record.ControlPlaneBindings, Overrides: record.Overrides}, remote)
		if err != nil {
			return nil, held, fmt.Errorf("compiling %s to roll back to: %w", record.Version, err)
		}
		stamp.Revision = record.Revision
		desired, chosen = &back, ChooseBack(held, &next, &back)
	}
	if m.Spec.Suspend {
		chosen = held
	}
	return desired, chosen, nil
}
