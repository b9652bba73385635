package flux

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Read is one ConfigMap or Secret that a Flux controller reads for a sync
// with its own rights, not with those of the ServiceAccount it
// impersonates to apply.
type Read struct {
	// Field says where it is named: the Flux kind and the field's path,
	// such as "HelmRelease spec.valuesFrom[0]".
	Field string
	// Kind is ConfigMap or Secret.
	Kind string
	Name string
}

func (r Read) String() string { return fmt.Sprintf("%s %s (%s)", r.Kind, r.Name, r.Field) }

// Reads lists what Flux reads with its own rights to run x: the Secret of
// every field named secretRef or ending in SecretRef (a source's
// credentials, CA, client certificate, proxy and signature keys, a
// Kustomization's decryption keys, a kubeconfig) and the object of every
// valuesFrom and substituteFrom entry. It walks the objects' fields by name
// rather than listing them, so a field a later expansion sets is covered
// without a change here. Objects are in the namespace of x's objects.
func Reads(x *Expansion) ([]Read, error) {
	var reads []Read
	for _, obj := range []client.Object{x.Source, x.Applier} {
		if obj == nil {
			continue
		}
		fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, fmt.Errorf("reading the fields of %T %s: %w", obj, obj.GetName(), err)
		}
		reads = walkReads(reads, reflect.TypeOf(obj).Elem().Name(), "spec", fields["spec"])
	}
	return reads, nil
}

// walkReads appends the reads named at or below value, found at path.
func walkReads(reads []Read, kind, path string, value any) []Read {
	switch v := value.(type) {
	case map[string]any:
		for _, key := range slices.Sorted(maps.Keys(v)) {
			at := path + "." + key
			switch {
			case strings.HasSuffix(strings.ToLower(key), "secretref"):
				if ref, ok := v[key].(map[string]any); ok {
					reads = append(reads, Read{Field: kind + " " + at, Kind: "Secret", Name: str(ref["name"])})
				}
			case key == "valuesFrom" || key == "substituteFrom":
				entries, _ := v[key].([]any)
				for i, e := range entries {
					if ref, ok := e.(map[string]any); ok {
						reads = append(reads, Read{Field: fmt.Sprintf("%s %s[%d]", kind, at, i), Kind: str(ref["kind"]), Name: str(ref["name"])})
					}
				}
			default:
				reads = walkReads(reads, kind, at, v[key])
			}
		}
	case []any:
		for i, e := range v {
			reads = walkReads(reads, kind, fmt.Sprintf("%s[%d]", path, i), e)
		}
	}
	return reads
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
