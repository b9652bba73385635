package assemblage

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// isFurtherPart says whether o is part k > 0 of a plan split over several
// Assemblages: named as one (fleeetv1.PlanPartName) and carrying a
// revision. Such a part is never reconciled alone: its plan's part 0 is.
func isFurtherPart(o client.Object) bool {
	asm, ok := o.(*fleeetv1.Assemblage)
	_, k := fleeetv1.PlanOfPart(o.GetName())
	return ok && k > 0 && asm.Spec.PartRevision != ""
}

// furtherParts and firstParts split the Assemblage events between the
// parts and the objects reconciled.
var (
	furtherParts = predicate.NewPredicateFuncs(isFurtherPart)
	firstParts   = predicate.NewPredicateFuncs(func(o client.Object) bool { return !isFurtherPart(o) })
)

// firstPartOf maps a further part to its plan's part 0.
func firstPartOf(_ context.Context, o client.Object) []reconcile.Request {
	plan, _ := fleeetv1.PlanOfPart(o.GetName())
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: plan}}}
}

// readPlan returns the plan first heads: first itself when it lists no
// parts, else a copy of first holding the union of every listed part's
// syncs and sync statuses, part 0's first, with the parts read
// (parts[k-1] is part k). A part counts as read only when first controls
// it; incomplete says which part keeps the plan from being whole.
func (r *Reconciler) readPlan(ctx context.Context, first *fleeetv1.Assemblage) (plan *fleeetv1.Assemblage, parts []*fleeetv1.Assemblage, incomplete, err error) {
	if len(first.Spec.Parts) == 0 {
		return first, nil, nil, nil
	}
	specs := make([]*fleeetv1.AssemblageSpec, len(first.Spec.Parts))
	for k := 1; k <= len(specs); k++ {
		part := &fleeetv1.Assemblage{}
		key := client.ObjectKey{Namespace: first.Namespace, Name: fleeetv1.PlanPartName(first.Name, k)}
		switch err := r.Client.Get(ctx, key, part); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, nil, nil, fmt.Errorf("reading part %d, Assemblage %s: %w", k, key, err)
		}
		if metav1.IsControlledBy(part, first) {
			specs[k-1] = &part.Spec
			parts = append(parts, part)
		}
	}
	if err := first.Spec.Whole(specs); err != nil {
		return nil, nil, err, nil
	}
	plan = first.DeepCopy()
	for _, part := range parts {
		plan.Spec.Syncs = append(plan.Spec.Syncs, part.Spec.Syncs...)
		plan.Status.Syncs = append(plan.Status.Syncs, part.Status.Syncs...)
	}
	return plan, parts, nil, nil
}

// reportParts splits the status reconciled for the whole plan over its
// parts: each part, first included, gets its own syncs' statuses and
// summary, and plan's conditions about its own generation. first's is
// written by the reconcile's patcher, the other parts' here.
func (r *Reconciler) reportParts(ctx context.Context, first, plan *fleeetv1.Assemblage, parts []*fleeetv1.Assemblage) error {
	first.Status = partStatus(plan, first)
	var errs []error
	for _, part := range parts {
		st := partStatus(plan, part)
		st.ObservedGeneration = part.Generation
		if equality.Semantic.DeepEqual(part.Status, st) {
			continue
		}
		part.Status = st
		if err := r.Client.Status().Update(ctx, part); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("writing the status of part %s: %w", part.Name, err))
		}
	}
	return errors.Join(errs...)
}

// partStatus is part's share of plan's status, but for its
// observedGeneration.
func partStatus(plan, part *fleeetv1.Assemblage) fleeetv1.AssemblageStatus {
	st := *plan.Status.DeepCopy()
	own := make(map[string]bool, len(part.Spec.Syncs))
	for _, s := range part.Spec.Syncs {
		own[s.Name] = true
	}
	st.Syncs = slices.DeleteFunc(st.Syncs, func(s fleeetv1.SyncStatus) bool { return !own[s.Name] })
	st.Summary, _ = summarize(st.Syncs)
	for i := range st.Conditions {
		st.Conditions[i].ObservedGeneration = part.Generation
	}
	return st
}
