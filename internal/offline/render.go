package offline

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/kustomize"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/bindings"
	"github.com/fleeet-dev/fleeet/internal/flux"
)

// Renderer renders compiled syncs into the manifests Flux applies for them
// downstream. A sync becomes Flux objects through the agent's own expansion
// (flux.Expand); a Kustomization is then built as kustomize-controller
// builds it (Flux's kustomize package: its generated kustomization.yaml,
// kustomize build, post-build substitution) and a HelmRelease is templated
// with the Helm SDK as helm template does. Equal syncs render once.
type Renderer struct {
	Sources *Sources
	// Namespace is the downstream namespace of the tenant's Assemblage
	// (the Upstream's), where a helm release without a targetNamespace
	// goes; it is not known offline.
	Namespace string
	// KubeVersion is the Kubernetes version charts are templated for
	// (.Capabilities.KubeVersion, kubeVersion constraints) on a cluster
	// whose version is not known; empty is DefaultKubeVersion.
	KubeVersion string
	done        map[string]string
}

// DefaultKubeVersion is the Kubernetes version charts are templated for
// unless told: the one fleeet is built and tested against.
const DefaultKubeVersion = "v1.36.0"

// Render returns what one sync applies on a cluster running kubeVersion
// (empty: r.KubeVersion), as YAML, headed by comments naming what cannot be
// known offline: downstream bindings (left as $(NAME)), substituteFrom and
// valuesFrom objects, which live in the cluster, and a HelmRelease's
// postRenderers, which are not applied here. A sync that cannot be
// rendered is an error naming it.
func (r *Renderer) Render(ctx context.Context, s *fleeetv1.NamedSync, kubeVersion string) (string, error) {
	values, unresolved := downstreamValues(s.Bindings)
	x, err := flux.Expand(flux.Target{Namespace: r.Namespace}, s, values, nil)
	if err != nil {
		return "", fmt.Errorf("sync %s: %w", s.Name, err)
	}
	kubeVersion = cmp.Or(kubeVersion, r.KubeVersion, DefaultKubeVersion)
	raw, err := json.Marshal([]any{x.Source, x.Applier, kubeVersion})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	key := hex.EncodeToString(sum[:])
	if out, ok := r.done[key]; ok {
		return out, nil
	}
	var manifests string
	switch applier := x.Applier.(type) {
	case *kustomizev1.Kustomization:
		if ps := applier.Spec.PostBuild; ps != nil {
			for _, ref := range ps.SubstituteFrom {
				unresolved = append(unresolved, fmt.Sprintf("substituteFrom %s %s is read in the cluster: its variables are not substituted here", ref.Kind, ref.Name))
			}
		}
		manifests, err = r.kustomize(ctx, x.Source, applier)
	case *helmv2.HelmRelease:
		for _, ref := range applier.Spec.ValuesFrom {
			unresolved = append(unresolved, fmt.Sprintf("valuesFrom %s %s is read in the cluster: its values are not merged here", ref.Kind, ref.Name))
		}
		if len(applier.Spec.PostRenderers) > 0 {
			unresolved = append(unresolved, "postRenderers are applied in the cluster, not here")
		}
		manifests, err = r.helm(ctx, x.Source, applier, kubeVersion)
	default:
		err = fmt.Errorf("a %T cannot be rendered offline", x.Applier)
	}
	if err != nil {
		return "", fmt.Errorf("sync %s: %w", s.Name, err)
	}
	var out strings.Builder
	for _, u := range unresolved {
		fmt.Fprintf(&out, "# unresolved: %s\n", u)
	}
	out.WriteString(manifests)
	if r.done == nil {
		r.done = map[string]string{}
	}
	r.done[key] = out.String()
	return out.String(), nil
}

// downstreamValues are a sync's bindings as far as they are known offline:
// a literal is resolved as the agent resolves it; a binding reading an
// object downstream stays $(NAME) in what is rendered, and is listed.
func downstreamValues(syncBindings []fleeetv1.Binding) (map[string]string, []string) {
	list := make([]bindings.Binding, len(syncBindings))
	var unresolved []string
	for i, b := range syncBindings {
		list[i] = bindings.Binding{Path: "binding " + b.Name, Name: b.Name, Value: b.Value}
		if ref := b.ObjectFieldRef; ref != nil {
			// $$( is the escape: the binding's value is the text $(NAME).
			kept := "$$(" + b.Name + ")"
			list[i].Value = &kept
			unresolved = append(unresolved, fmt.Sprintf("binding %s reads %s %s %s in the cluster: shown as $(%s)",
				b.Name, ref.Kind, ref.Name, ref.FieldPath, b.Name))
		}
	}
	values, _ := bindings.Resolve(list) // literals only: nothing to fail
	return values, unresolved
}

// kustomize builds a Kustomization from a fresh copy of its source, as
// kustomize-controller does, with remote bases refused and SOPS-encrypted
// data left encrypted: no key is used offline.
func (r *Renderer) kustomize(ctx context.Context, src client.Object, ks *kustomizev1.Kustomization) (string, error) {
	root, err := os.MkdirTemp(r.Sources.dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(root)
	if err := r.Sources.FetchTo(ctx, src, root); err != nil {
		return "", err
	}
	manifests, err := build(ctx, root, ks)
	return manifests, inDir(err, root)
}

// build builds a Kustomization in the source copied to root.
func build(ctx context.Context, root string, ks *kustomizev1.Kustomization) (string, error) {
	dir, err := securejoin.SecureJoin(root, ks.Spec.Path)
	if err != nil {
		return "", fmt.Errorf("package.kustomize.path %q: %w", ks.Spec.Path, err)
	}
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("package.kustomize.path %q: not in the source", ks.Spec.Path)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ks)
	if err != nil {
		return "", err
	}
	u := unstructured.Unstructured{Object: obj}
	if _, err := kustomize.NewGenerator(root, u).WriteFile(dir); err != nil {
		return "", fmt.Errorf("generating kustomization.yaml: %w", err)
	}
	m, err := kustomize.SecureBuild(root, dir, false)
	if err != nil {
		return "", fmt.Errorf("kustomize build: %w", err)
	}
	if ks.Spec.PostBuild != nil {
		for _, res := range m.Resources() {
			out, err := kustomize.SubstituteVariables(ctx, nil, u, res, kustomize.SubstituteWithDryRun(true))
			if err != nil {
				return "", fmt.Errorf("post-build substitution of %s %s: %w", res.GetKind(), res.GetName(), err)
			}
			if out != nil {
				if _, err := m.Replace(res); err != nil {
					return "", err
				}
			}
		}
	}
	yaml, err := m.AsYaml()
	return string(yaml), err
}

// inDir writes the paths under dir that err names relative to it: the work
// directory differs between runs and between the two checkouts, and a
// failure must read the same in both.
func inDir(err error, dir string) error {
	if err == nil {
		return nil
	}
	return errors.New(strings.ReplaceAll(err.Error(), dir, "."))
}

// helm templates a HelmRelease's chart as helm template does (client only,
// CRDs and hooks included, lookups finding nothing), in the release's
// target namespace or the Assemblage's, for kubeVersion. Test hooks are left out: Flux runs
// no chart tests unless told, and their names are often random.
func (r *Renderer) helm(ctx context.Context, src client.Object, hr *helmv2.HelmRelease, kubeVersion string) (string, error) {
	var name, version string
	if c := hr.Spec.Chart; c != nil { // else a chartRef: the source is the chart
		name, version = c.Spec.Chart, c.Spec.Version
	}
	ch, err := r.Sources.Chart(ctx, src, name, version)
	if err != nil {
		return "", err
	}
	values := map[string]any{}
	if hr.Spec.Values != nil {
		if err := json.Unmarshal(hr.Spec.Values.Raw, &values); err != nil {
			return "", fmt.Errorf("package.helm.values: %w", err)
		}
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.ClientOnly, install.Replace, install.IncludeCRDs = true, true, true, true
	install.ReleaseName, install.Namespace = hr.Spec.ReleaseName, hr.Spec.TargetNamespace
	kube, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return "", fmt.Errorf("kubernetes version %q: %w", kubeVersion, err)
	}
	install.KubeVersion = kube
	if install.Namespace == "" {
		install.Namespace = r.Namespace
	}
	rel, err := install.RunWithContext(ctx, ch, values)
	if err != nil {
		return "", fmt.Errorf("helm template %s %s: %w", ch.Name(), ch.Metadata.Version, err)
	}
	var out strings.Builder
	out.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		if slices.Contains(h.Events, release.HookTest) {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return out.String(), nil
}
