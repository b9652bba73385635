package compile

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Eventual is the plan a Remote holds once every rollout of modules is
// through: Plan with each Module rolled out all at once, so every Remote is
// admitted, and each selecting Module's stamp. Previews use it: what a
// change does once rolled out, not where its rollout stands. The plan
// is split over parts as the manager's, each of at most maxBytes and
// fleeetv1.MaxSyncs syncs, from current, the parts the Remote holds.
func Eventual(ctx context.Context, reader client.Reader, modules []fleeetv1.Module, r *fleeetv1.Remote,
	current Parts, maxBytes int) (Parts, map[string]fleeetv1.Compiled, error) {
	done := make([]fleeetv1.Module, len(modules))
	for i := range modules {
		modules[i].DeepCopyInto(&done[i])
		done[i].Spec.Rollout.Strategy = fleeetv1.AllAtOnceStrategy
	}
	limit := Limit{MaxBytes: maxBytes, MaxSyncs: fleeetv1.MaxSyncs, MaxParts: fleeetv1.MaxPlanParts,
		RetryRequestedAt: r.Annotations[fleeetv1.RetryAnnotation]}
	return Plan(ctx, reader, done, r, current, limit, nil)
}
