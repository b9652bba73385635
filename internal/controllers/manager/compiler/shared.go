package compiler

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// readsPlans reports whether the Remote's plan parts may name CompiledPlans:
// a push Remote's, which the manager resolves itself, and a pull Remote's
// whose agent says it reads them.
func readsPlans(r *fleeetv1.Remote) bool {
	return r.Spec.KubeconfigRef != nil || r.Status.ReadsCompiledPlans
}

// share returns wire, the Remote's plan as it names CompiledSyncs, with
// what its parts have in common with other Remotes' moved into
// CompiledPlans, when the Remote reads them (readsPlans): per part, the
// entries that name a CompiledSync and deliver no Secret, and the stamps.
// What is the Remote's alone stays in the part: whole syncs, compiled for
// it (control-plane bindings), and the entries delivering Secrets, which
// the manager's delivery reads from the plan. Remotes at the same versions
// name the same CompiledPlan, so a version change writes one, and a small
// part per Remote.
//
// A part that named a CompiledPlan with the same entries names it on for
// them, and the new one for the stamps alone: a new Module generation that
// compiles to the same entries leaves the part's generation, and the
// cluster's report of it, as they are.
func (c *Reconciler) share(ctx context.Context, remote *fleeetv1.Remote, stored fleeetv1.ProxyPlan, wire plan) (plan, error) {
	if !readsPlans(remote) {
		return wire, nil
	}
	out := wire
	out.parts, out.compiled, out.shared = slices.Clone(wire.parts), make([]string, len(wire.parts)), make([]sharedRefs, len(wire.parts))
	store := plancontent.From(c.contentReader(), remote.Namespace)
	for k := range wire.parts {
		var own, shared []fleeetv1.NamedSync
		for _, s := range wire.parts[k].Syncs {
			if s.Content != "" && len(s.Secrets) == 0 {
				shared = append(shared, s)
			} else {
				own = append(own, s)
			}
		}
		cp := plancontent.NewPlan(remote.Namespace, shared, wire.own[k])
		if err := c.store(ctx, client.ObjectKeyFromObject(cp), &fleeetv1.CompiledPlan{}, func() client.Object { return cp }); err != nil {
			return plan{}, err
		}
		refs := sharedRefs{entries: cp.Name, stamps: cp.Name}
		if k < len(stored) && stored[k] != nil && stored[k].Spec.CompiledPlan != "" && stored[k].Spec.CompiledPlan != cp.Name {
			if was, err := store.CompiledPlan(ctx, stored[k].Spec.CompiledPlan); err == nil && equality.Semantic.DeepEqual(was.Spec.Entries, cp.Spec.Entries) {
				refs.entries = was.Name
			}
		}
		out.parts[k].Syncs = own
		out.shared[k] = refs
	}
	return out, nil
}
