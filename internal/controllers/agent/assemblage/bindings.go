package assemblage

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/bindings"
)

// resolveBindings evaluates a sync's bindings in order, each against the
// values of the bindings before it, reading objectFieldRef objects from
// namespace through reader, which acts as the tenant's ServiceAccount: what
// it refuses fails the binding.
func resolveBindings(ctx context.Context, reader client.Reader, namespace string, syncBindings []fleeetv1.Binding) (map[string]string, error) {
	list := make([]bindings.Binding, len(syncBindings))
	for i, b := range syncBindings {
		list[i] = bindings.Binding{Path: "binding " + b.Name, Name: b.Name, Value: b.Value}
		if ref := b.ObjectFieldRef; ref != nil {
			list[i].Field = ref.FieldPath
			list[i].Read = func() (any, string, error) { return readObject(ctx, reader, namespace, ref) }
		}
	}
	return bindings.Resolve(list)
}

// readObject reads the object an objectFieldRef names.
func readObject(ctx context.Context, reader client.Reader, namespace string, ref *fleeetv1.ObjectFieldRef) (any, string, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, "", fmt.Errorf("objectFieldRef.apiVersion %q: %w", ref.APIVersion, err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gv.WithKind(ref.Kind))
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, obj); err != nil {
		return nil, "", fmt.Errorf("reading %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
	}
	return obj.Object, fmt.Sprintf("%s %s/%s", ref.Kind, namespace, ref.Name), nil
}
