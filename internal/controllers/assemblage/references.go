package assemblage

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// checkReferences makes sure that reader, acting as the tenant's
// ServiceAccount, may read every ConfigMap and Secret of namespace that a
// sync's package takes values (helm valuesFrom) or variables (kustomize
// substituteFrom) from. Flux's controllers read those with their own
// rights, not the account's they impersonate to apply, so without this a
// tenant could have a Secret it may not read — another tenant's, in a
// shared namespace — rendered into objects it may. Only metadata is read;
// a missing object is left for Flux to report (or skip, when optional).
func checkReferences(ctx context.Context, reader client.Reader, namespace string, pkg *fleeetv1.Package) error {
	type ref struct{ field, kind, name string }
	var refs []ref
	if h := pkg.Helm; h != nil {
		for i, v := range h.ValuesFrom {
			refs = append(refs, ref{fmt.Sprintf("package.helm.valuesFrom[%d]", i), v.Kind, v.Name})
		}
	}
	if k := pkg.Kustomize; k != nil {
		for i, v := range k.SubstituteFrom {
			refs = append(refs, ref{fmt.Sprintf("package.kustomize.substituteFrom[%d]", i), v.Kind, v.Name})
		}
	}
	for _, r := range refs {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(r.kind))
		switch err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: r.name}, obj); {
		case apierrors.IsForbidden(err):
			return fmt.Errorf("%s: the tenant's ServiceAccount may not read %s %s/%s", r.field, r.kind, namespace, r.name)
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("%s: reading %s %s/%s: %w", r.field, r.kind, namespace, r.name, err)
		}
	}
	return nil
}
