package flux

import (
	"github.com/fluxcd/pkg/apis/kustomize"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// patches are a sync's kustomize patches as Flux takes them. They are not
// expanded: $(NAME) in a manifest is Kubernetes' own syntax.
func patches(list []fleeetv1.KustomizePatch) []kustomize.Patch {
	var out []kustomize.Patch
	for _, p := range list {
		out = append(out, kustomize.Patch{Patch: p.Patch, Target: selector(p.Target)})
	}
	return out
}

// selector is a patch target as Flux takes it; nil selects everything.
func selector(t *fleeetv1.PatchTarget) *kustomize.Selector {
	if t == nil {
		return nil
	}
	return &kustomize.Selector{Group: t.Group, Version: t.Version, Kind: t.Kind, Name: t.Name,
		Namespace: t.Namespace, LabelSelector: t.LabelSelector, AnnotationSelector: t.AnnotationSelector}
}
