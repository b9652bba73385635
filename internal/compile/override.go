package compile

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Matching returns the overrides whose selectors pick Remote r, in the
// order they apply.
func Matching(overrides []fleeetv1.Override, r *fleeetv1.Remote) ([]*fleeetv1.Override, error) {
	var picked []*fleeetv1.Override
	for i := range overrides {
		o := &overrides[i]
		ok, err := picks(&o.Selector, r.Labels)
		if err != nil {
			return nil, fmt.Errorf("spec.overrides[%s].selector: %w", o.Name, err)
		}
		if ok {
			picked = append(picked, o)
		}
	}
	return picked, nil
}

// picks reports whether a selector matches labels. A selector of labels
// alone, the common case, is matched without parsing it, since a fleet's
// compile matches every override against every Remote; the Module
// controller reports a selector that does not parse.
func picks(selector *metav1.LabelSelector, lbls map[string]string) (bool, error) {
	if len(selector.MatchExpressions) == 0 {
		for k, v := range selector.MatchLabels {
			if have, ok := lbls[k]; !ok || have != v {
				return false, nil
			}
		}
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return false, err
	}
	return sel.Matches(labels.Set(lbls)), nil
}

// override applies the overrides that pick Remote r to spec, which the
// caller owns, in list order so that a later one wins: a kustomize path
// replaced, patches appended, images and substitute values replaced by name
// or key, and helm values deep-merged into the document it returns (nil
// when no helm override applied), which the caller encodes once bindings
// are expanded.
func override(spec *fleeetv1.SyncSpec, overrides []fleeetv1.Override, r *fleeetv1.Remote) (map[string]any, error) {
	picked, err := Matching(overrides, r)
	if err != nil {
		return nil, err
	}
	var values map[string]any
	for _, o := range picked {
		switch h, k := spec.Package.Helm, spec.Package.Kustomize; {
		case o.Helm != nil && h != nil:
			if values, err = mergeValues(values, h.Values, o.Helm.Values); err != nil {
				return nil, fmt.Errorf("spec.overrides[%s].helm.values: %w", o.Name, err)
			}
		case o.Kustomize != nil && k != nil:
			overrideKustomize(k, o.Kustomize)
		default: // admission refuses it; an object stored before is reported
			return nil, fmt.Errorf("spec.overrides[%s]: its kind does not match the sync's package", o.Name)
		}
	}
	return values, nil
}

// mergeValues deep-merges an override's values over doc, the values merged
// so far, decoding the sync's own values (base) first when doc is nil.
func mergeValues(doc map[string]any, base, over *apiextensionsv1.JSON) (map[string]any, error) {
	if doc == nil {
		doc = map[string]any{}
		if base != nil && len(base.Raw) > 0 {
			if err := json.Unmarshal(base.Raw, &doc); err != nil {
				return nil, fmt.Errorf("spec.sync.package.helm.values is not a JSON object: %w", err)
			}
		}
	}
	if over == nil || len(over.Raw) == 0 {
		return doc, nil
	}
	var values map[string]any
	if err := json.Unmarshal(over.Raw, &values); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	merge(doc, values)
	return doc, nil
}

// merge merges over into base as Helm merges values files: objects merge
// key by key, anything else replaces, and null deletes the key.
func merge(base, over map[string]any) {
	for key, v := range over {
		if v == nil {
			delete(base, key)
			continue
		}
		into, isMap := base[key].(map[string]any)
		from, fromMap := v.(map[string]any)
		if isMap && fromMap {
			merge(into, from)
			continue
		}
		base[key] = v
	}
}

// overrideKustomize applies one kustomize override to a package.
func overrideKustomize(k *fleeetv1.KustomizePackage, o *fleeetv1.KustomizeOverride) {
	if o.Path != "" {
		k.Path = o.Path
	}
	for _, p := range o.Patches {
		k.Patches = append(k.Patches, *p.DeepCopy()) // the sync shares nothing with its Module
	}
	for _, img := range o.Images {
		if i := slices.IndexFunc(k.Images, func(have fleeetv1.KustomizeImage) bool { return have.Name == img.Name }); i >= 0 {
			k.Images[i] = img
		} else {
			k.Images = append(k.Images, img)
		}
	}
	if len(o.Substitute) > 0 && k.Substitute == nil {
		k.Substitute = make(map[string]string, len(o.Substitute))
	}
	maps.Copy(k.Substitute, o.Substitute)
}
