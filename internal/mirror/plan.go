package mirror

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Assemble reads the further parts first lists, part k through read (nil
// when it does not exist), and returns the whole plan, part 0 first. When
// the plan is not whole (a part missing or at another revision than first
// lists), incomplete says which part, for a condition, and nothing may be
// acted on; err is a failure to read.
func Assemble(first *fleeetv1.ProxyAssemblage, read func(k int) (*fleeetv1.ProxyAssemblage, error)) (plan []*fleeetv1.ProxyAssemblage, incomplete, err error) {
	plan = []*fleeetv1.ProxyAssemblage{first}
	specs := make([]*fleeetv1.AssemblageSpec, len(first.Spec.Assemblage.Parts))
	for k := 1; k <= len(specs); k++ {
		part, err := read(k)
		if err != nil {
			return nil, nil, fmt.Errorf("reading part %d of the plan: %w", k, err)
		}
		if part != nil {
			specs[k-1] = &part.Spec.Assemblage
		}
		plan = append(plan, part)
	}
	if err := first.Spec.Assemblage.Whole(specs); err != nil {
		return nil, err, nil
	}
	return plan, nil, nil
}

// Syncs is the union of a plan's syncs, part 0's first.
func Syncs(plan []*fleeetv1.ProxyAssemblage) []fleeetv1.NamedSync {
	var syncs []fleeetv1.NamedSync
	for _, pa := range plan {
		syncs = append(syncs, pa.Spec.Assemblage.Syncs...)
	}
	return syncs
}

// Downstream is where a plan is mirrored: part k into the Assemblage
// PlanPartName(Key.Name, k) in Key.Namespace.
type Downstream struct {
	// Client reads and writes the downstream cluster.
	Client client.Client
	// Key names part 0 downstream.
	Key client.ObjectKey
	// ServiceAccount, when set, replaces the plan's (see Spec).
	ServiceAccount string
	// Annotations are set on every part.
	Annotations map[string]string
	// Create creates an Assemblage that does not exist yet; nil is
	// Client.Create.
	Create func(context.Context, *fleeetv1.Assemblage) error
}

// Write mirrors a whole plan, part 0 first in plan, 1:1 into downstream
// Assemblages and returns them in the same order, and whether any changed.
// Further parts are written first, owned by part 0 so they go with it, and
// part 0 last, since it publishes which parts make the plan (part 0 is
// created first when it does not exist yet: downstream it waits for the
// parts it lists). Parts part 0 no longer lists are deleted after, each
// time part 0 is written: a part left by a failed delete is not read by
// anything and goes with part 0.
func (d Downstream) Write(ctx context.Context, plan []*fleeetv1.ProxyAssemblage) ([]*fleeetv1.Assemblage, bool, error) {
	asms := make([]*fleeetv1.Assemblage, len(plan))
	first, exists, err := d.get(ctx, 0)
	if err != nil {
		return nil, false, err
	}
	changed := false
	if !exists {
		if err := d.write(ctx, first, false, plan[0], nil); err != nil {
			return nil, false, err
		}
		changed = true
	}
	for k := 1; k < len(plan); k++ {
		asm, exists, err := d.get(ctx, k)
		if err != nil {
			return nil, false, err
		}
		if changed, err = d.upsert(ctx, asm, exists, plan[k], first, changed); err != nil {
			return nil, false, err
		}
		asms[k] = asm
	}
	published := !exists
	if exists {
		if published = d.differs(first, plan[0], nil); published {
			if err := d.write(ctx, first, true, plan[0], nil); err != nil {
				return nil, false, err
			}
		}
	}
	asms[0] = first
	if !published {
		return asms, changed, nil
	}
	return asms, true, d.prune(ctx, first, len(plan))
}

// upsert writes pa's part into asm when it differs, and adds that to changed.
func (d Downstream) upsert(ctx context.Context, asm *fleeetv1.Assemblage, exists bool, pa *fleeetv1.ProxyAssemblage, owner *fleeetv1.Assemblage, changed bool) (bool, error) {
	if exists && !d.differs(asm, pa, owner) {
		return changed, nil
	}
	return true, d.write(ctx, asm, exists, pa, owner)
}

// differs copies pa's part, the annotations and owner into asm and reports
// whether asm changed.
func (d Downstream) differs(asm *fleeetv1.Assemblage, pa *fleeetv1.ProxyAssemblage, owner *fleeetv1.Assemblage) bool {
	changed := Spec(asm, pa, d.ServiceAccount)
	for k, v := range d.Annotations {
		if asm.Annotations[k] != v {
			asm.Annotations[k], changed = v, true
		}
	}
	if owner != nil && !metav1.IsControlledBy(asm, owner) {
		// No blockOwnerDeletion: the writer needs no right to part 0's
		// finalizers.
		asm.OwnerReferences = []metav1.OwnerReference{{APIVersion: fleeetv1.GroupVersion.String(), Kind: "Assemblage",
			Name: owner.Name, UID: owner.UID, Controller: new(true)}}
		changed = true
	}
	return changed
}

// write creates or updates asm as pa's part.
func (d Downstream) write(ctx context.Context, asm *fleeetv1.Assemblage, exists bool, pa *fleeetv1.ProxyAssemblage, owner *fleeetv1.Assemblage) error {
	d.differs(asm, pa, owner)
	var err error
	switch {
	case exists:
		err = d.Client.Update(ctx, asm)
	case d.Create != nil:
		return d.Create(ctx, asm)
	default:
		err = d.Client.Create(ctx, asm)
	}
	if err != nil {
		return fmt.Errorf("writing Assemblage %s/%s: %w", asm.Namespace, asm.Name, err)
	}
	return nil
}

// get reads part k downstream; one that does not exist is returned empty,
// named, with exists false.
func (d Downstream) get(ctx context.Context, k int) (asm *fleeetv1.Assemblage, exists bool, err error) {
	key := client.ObjectKey{Namespace: d.Key.Namespace, Name: fleeetv1.PlanPartName(d.Key.Name, k)}
	asm = &fleeetv1.Assemblage{}
	switch err := d.Client.Get(ctx, key, asm); {
	case apierrors.IsNotFound(err):
		return &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading Assemblage %s: %w", key, err)
	}
	return asm, true, nil
}

// prune deletes the parts of first's plan from part from on: those first
// no longer lists. Only Assemblages that are parts owned by first are
// touched.
func (d Downstream) prune(ctx context.Context, first *fleeetv1.Assemblage, from int) error {
	for k := from; k < fleeetv1.MaxPlanParts; k++ {
		asm, exists, err := d.get(ctx, k)
		if err != nil {
			return err
		}
		if !exists || asm.Spec.PartRevision == "" || !metav1.IsControlledBy(asm, first) {
			continue
		}
		if err := d.Client.Delete(ctx, asm, client.Preconditions{UID: &asm.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Assemblage %s/%s, a part the plan no longer lists: %w", asm.Namespace, asm.Name, err)
		}
	}
	return nil
}
