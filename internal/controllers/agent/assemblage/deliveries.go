package assemblage

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/delivery"
	"github.com/fleeet-dev/fleeet/internal/flux"
)

// reconcileDeliveries deletes the Secrets delivered for asm that nothing
// uses any more: no sync of the spec names one, and no Flux applier still
// present, those of syncs being removed included, was applied naming it.
// So a Secret a running workload reads stays until the sync that brought
// it is gone. Whoever delivers (the Upstream controller pulling, the
// manager pushing) writes only what the spec names, so a Secret deleted
// here is not written again.
func (r *Reconciler) reconcileDeliveries(ctx context.Context, asm *fleeetv1.Assemblage, objs map[string]flux.Objects) error {
	inUse := map[string]bool{}
	for _, name := range delivery.Names(asm.Spec.Syncs) {
		inUse[name] = true
	}
	for _, o := range objs {
		if o.Applier == nil {
			continue
		}
		for name := range strings.SplitSeq(annotation(o.Applier, fleeetv1.SecretsAnnotation), ",") {
			if name != "" {
				inUse[name] = true
			}
		}
	}
	pruned, err := delivery.Prune(ctx, r.Client, asm, inUse)
	for _, name := range pruned {
		log.FromContext(ctx).Info("Deleted delivered Secret no sync uses", "secret", name)
		r.Recorder.Eventf(asm, nil, corev1.EventTypeNormal, fleeetv1.ReasonSecretRemoved, "Delete",
			"Deleted delivered Secret %s: no sync uses it any more", name)
	}
	return err
}
