package assemblage

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
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
// namespace through reader.
func resolveBindings(ctx context.Context, reader client.Reader, namespace string, bindings []fleeetv1.Binding) (map[string]string, error) {
	values := make(map[string]string, len(bindings))
	for _, b := range bindings {
		switch {
		case b.Value != nil:
			values[b.Name] = expand(*b.Value, values)
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
	v, err := lookupPointer(obj.Object, ref.FieldPath)
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

// lookupPointer follows an RFC 6901 JSON pointer through decoded JSON.
func lookupPointer(doc any, pointer string) (any, error) {
	if pointer == "" {
		return doc, nil
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, fmt.Errorf("field path %q is not a JSON pointer", pointer)
	}
	cur := doc
	for _, token := range strings.Split(pointer[1:], "/") {
		token = strings.NewReplacer("~1", "/", "~0", "~").Replace(token)
		switch node := cur.(type) {
		case map[string]any:
			next, ok := node[token]
			if !ok {
				return nil, fmt.Errorf("field %s not found", pointer)
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(token)
			if err != nil || i < 0 || i >= len(node) {
				return nil, fmt.Errorf("field %s not found: no index %q", pointer, token)
			}
			cur = node[i]
		default:
			return nil, fmt.Errorf("field %s not found", pointer)
		}
	}
	return cur, nil
}

// expand replaces every $(NAME) in s with the value of binding NAME and every
// $$( with a literal $(. Mentions of names that are not bindings stay as they
// are, as in Kubernetes' own $(VAR) expansion of container arguments.
func expand(s string, values map[string]string) string {
	if !strings.Contains(s, "$(") {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$$("):
			out.WriteString("$(")
			i += 3
		case strings.HasPrefix(s[i:], "$("):
			end := strings.IndexByte(s[i+2:], ')')
			if end >= 0 {
				if v, ok := values[s[i+2:i+2+end]]; ok {
					out.WriteString(v)
					i += end + 3
					continue
				}
			}
			out.WriteString("$(")
			i += 2
		default:
			out.WriteByte(s[i])
			i++
		}
	}
	return out.String()
}

// expandJSON applies expand to every string leaf of a JSON document.
func expandJSON(raw []byte, values map[string]string) ([]byte, error) {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	return json.Marshal(expandLeaves(doc, values))
}

func expandLeaves(node any, values map[string]string) any {
	switch v := node.(type) {
	case string:
		return expand(v, values)
	case map[string]any:
		for k, child := range v {
			v[k] = expandLeaves(child, values)
		}
	case []any:
		for i, child := range v {
			v[i] = expandLeaves(child, values)
		}
	}
	return node
}
