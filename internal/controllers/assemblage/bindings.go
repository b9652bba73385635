package assemblage

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/bindings"
)

// bindingError says which binding of a sync could not be resolved and why.
type bindingError struct {
	name   string
	reason string
}

func (e *bindingError) Error() string {
	return fmt.Sprintf("binding %s: %s", e.name, e.reason)
}

// resolveBindings evaluates a sync's bindings in order, each against the
// values of the bindings before it, reading objectFieldRef objects from
// namespace through reader, which acts as the tenant's ServiceAccount: what
// it refuses fails the binding.
func resolveBindings(ctx context.Context, reader client.Reader, namespace string, syncBindings []fleeetv1.Binding) (map[string]string, error) {
	values := make(map[string]string, len(syncBindings))
	for _, b := range syncBindings {
		switch {
		case b.Value != nil:
			values[b.Name] = bindings.Expand(*b.Value, values)
		case b.ObjectFieldRef != nil:
			v, err := readField(ctx, reader, namespace, b.ObjectFieldRef)
			if err != nil {
				return nil, &bindingError{name: b.Name, reason: err.Error()}
			}
			values[b.Name] = v
		}
	}
	return values, nil
}

// readField reads the field ref.FieldPath (a JSON pointer) of one object.
// Strings are used as they are; other values as their JSON text.
func readField(ctx context.Context, reader client.Reader, namespace string, ref *fleeetv1.ObjectFieldRef) (string, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return "", fmt.Errorf("objectFieldRef.apiVersion %q: %w", ref.APIVersion, err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gv.WithKind(ref.Kind))
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, obj); err != nil {
		return "", fmt.Errorf("reading %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
	}
	v, err := bindings.Lookup(obj.Object, ref.FieldPath)
	if err != nil {
		return "", fmt.Errorf("%s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
	}
	if s, ok := v.(string); ok {
		return s, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%s %s/%s field %s: %w", ref.Kind, namespace, ref.Name, ref.FieldPath, err)
	}
	return string(b), nil
}
