package flux

import (
	"context"
	"fmt"
	"slices"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// List reads the Flux objects of a namespace carrying the given labels and
// groups them by the value of their groupBy label.
func List(ctx context.Context, c client.Client, namespace string, labels map[string]string, groupBy string) (map[string]Objects, error) {
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingLabels(labels)}
	objs := map[string]Objects{}
	for _, l := range []struct {
		list   client.ObjectList
		source bool
	}{
		{&kustomizev1.KustomizationList{}, false}, {&helmv2.HelmReleaseList{}, false},
		{&sourcev1.GitRepositoryList{}, true}, {&sourcev1.OCIRepositoryList{}, true}, {&sourcev1.HelmRepositoryList{}, true},
	} {
		if err := c.List(ctx, l.list, opts...); err != nil {
			return nil, fmt.Errorf("listing Flux objects in %s: %w", namespace, err)
		}
		err := apimeta.EachListItem(l.list, func(o runtime.Object) error {
			obj := o.(client.Object)
			key := obj.GetLabels()[groupBy]
			cur := objs[key]
			if l.source {
				cur.Source = obj
			} else {
				cur.Applier = obj
			}
			objs[key] = cur
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// Apply server-side applies one Flux object as controlled by owner. The
// field manager owns every field it sets; fields it stops setting are released.
func Apply(ctx context.Context, c client.Client, owner, obj client.Object, fieldOwner string) error {
	if err := controllerutil.SetControllerReference(owner, obj, c.Scheme()); err != nil {
		return err
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return err
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	delete(content, "status")
	unstructured.RemoveNestedField(content, "metadata", "creationTimestamp")
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(gvk)
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership)
}

// owned are the Flux kinds a sync expands into.
func owned() []client.Object {
	return []client.Object{&kustomizev1.Kustomization{}, &helmv2.HelmRelease{},
		&sourcev1.GitRepository{}, &sourcev1.OCIRepository{}, &sourcev1.HelmRepository{}}
}

// Owns makes a controller watch the Flux objects its objects own, status
// included, so Flux's progress reaches the owner without polling.
func Owns(b *builder.Builder) *builder.Builder {
	for _, o := range owned() {
		b = b.Owns(o)
	}
	return b
}

// Unserved lists, as group/version/kind, the kinds Owns watches that the
// cluster dc reads does not serve: a watch of one would never sync.
func Unserved(dc discovery.DiscoveryInterface, scheme *runtime.Scheme) ([]string, error) {
	var missing []string
	for _, o := range owned() {
		gvk, err := apiutil.GVKForObject(o, scheme)
		if err != nil {
			return nil, err
		}
		resources, err := dc.ServerResourcesForGroupVersion(gvk.GroupVersion().String())
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("asking the cluster whether it serves %s: %w", gvk.GroupVersion(), err)
		}
		if resources == nil || !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Kind == gvk.Kind }) {
			missing = append(missing, gvk.GroupVersion().String()+"/"+gvk.Kind)
		}
	}
	return missing, nil
}

// Suspended reports whether a Kustomization or HelmRelease is suspended.
func Suspended(applier client.Object) bool {
	switch a := applier.(type) {
	case *kustomizev1.Kustomization:
		return a.Spec.Suspend
	case *helmv2.HelmRelease:
		return a.Spec.Suspend
	}
	return false
}
