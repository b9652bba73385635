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
		sel, err := metav1.LabelSelectorAsSelector(&o.Selector)
		if err != nil {
			return nil, fmt.Errorf("spec.overrides[%s].selector: %w", o.Name, err)
		}
		if sel.Matches(labels.Set(r.Labels)) {
			picked = append(picked, o)
		}
	}
	return picked, nil
}

// override applies the overrides that pick Remote r to spec, which the
// caller owns, in list order so that a later one wins: helm values are
// deep-merged, kustomize patches appended, images and substitute values
// replaced by name or key.
func override(spec *fleeetv1.SyncSpec, overrides []fleeetv1.Override, r *fleeetv1.Remote) error {
	picked, err := Matching(overrides, r)
	if err != nil {
		return err
	}
	for _, o := range picked {
		switch h, k := spec.Package.Helm, spec.Package.Kustomize; {
		case o.Helm != nil && h != nil:
			if err := mergeValues(h, o.Helm.Values); err != nil {
				return fmt.Errorf("spec.overrides[%s].helm.values: %w", o.Name, err)
			}
		case o.Kustomize != nil && k != nil:
			overrideKustomize(k, o.Kustomize)
		default: // admission refuses it; an object stored before is reported
			return fmt.Errorf("spec.overrides[%s]: its kind does not match the sync's package", o.Name)
		}
	}
	return nil
}

// mergeValues deep-merges values over a helm package's values.
func mergeValues(h *fleeetv1.HelmPackage, values *apiextensionsv1.JSON) error {
	if values == nil || len(values.Raw) == 0 {
		return nil
	}
	var over map[string]any
	if err := json.Unmarshal(values.Raw, &over); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	base := map[string]any{}
	if h.Values != nil && len(h.Values.Raw) > 0 {
		if err := json.Unmarshal(h.Values.Raw, &base); err != nil {
			return fmt.Errorf("spec.sync.package.helm.values is not a JSON object: %w", err)
		}
	}
	merge(base, over)
	raw, err := json.Marshal(base)
	if err != nil {
		return err
	}
	h.Values = &apiextensionsv1.JSON{Raw: raw}
	return nil
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
