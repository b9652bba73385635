package compiler

import (
	"context"
	"slices"

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
// CompiledPlans, when the Remote reads them (readsPlans). A part with
// entries that name a CompiledSync and deliver no Secret names two: one
// holding those entries alone (ProxyAssemblageSpec.CompiledPlan), and one
// holding them with the part's stamps (CompiledPlanAnnotation). What is
// the Remote's alone stays in the part: whole syncs, compiled for it
// (control-plane bindings), and the entries delivering Secrets, which the
// manager's delivery reads from the plan. A part with no such entries
// keeps its stamps in CompiledAnnotation: a CompiledPlan of stamps alone
// would be named by a hash of Module names and generations, which anyone
// could work out.
//
// Both names are hashes of what the CompiledPlan holds, so Remotes at the
// same versions name the same ones whatever their plans named before, and
// a version change writes two CompiledPlans and a small part per Remote. A
// new Module generation that compiles to the same entries changes the
// stamps alone: the part's spec, its generation and the cluster's report
// of it stay as they are.
func (c *Reconciler) share(ctx context.Context, remote *fleeetv1.Remote, wire plan) (plan, error) {
	if !readsPlans(remote) {
		return wire, nil
	}
	out := wire
	out.parts, out.compiled, out.shared = slices.Clone(wire.parts), slices.Clone(wire.compiled), make([]sharedRefs, len(wire.parts))
	for k := range wire.parts {
		var own, shared []fleeetv1.NamedSync
		for _, s := range wire.parts[k].Syncs {
			if s.Content != "" && len(s.Secrets) == 0 {
				shared = append(shared, s)
			} else {
				own = append(own, s)
			}
		}
		if len(shared) == 0 {
			continue
		}
		entries, stamps := plancontent.NewPlan(remote.Namespace, shared, nil), plancontent.NewPlan(remote.Namespace, shared, wire.own[k])
		for _, cp := range []*fleeetv1.CompiledPlan{entries, stamps} {
			if err := c.store(ctx, client.ObjectKeyFromObject(cp), &fleeetv1.CompiledPlan{}, func() client.Object { return cp }); err != nil {
				return plan{}, err
			}
		}
		out.parts[k].Syncs, out.compiled[k] = own, ""
		out.shared[k] = sharedRefs{entries: entries.Name, stamps: stamps.Name}
	}
	return out, nil
}
