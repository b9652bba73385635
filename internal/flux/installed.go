package flux

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// VersionLabel is the label Flux's installers put on its CRDs: `flux
// install` the Flux release (v2.7.3), a per-controller install the
// controller's own version.
const VersionLabel = "app.kubernetes.io/version"

// unknownVersion stands for a version no CRD's label gives.
const unknownVersion = "unknown"

// writtenKind is one kind fleeet writes into a cluster, at the API version it
// writes, and the Flux controller whose CRD serves it.
type writtenKind struct {
	gvk        schema.GroupVersionKind
	plural     string
	controller string
}

// crdName is the name of the kind's CustomResourceDefinition.
func (k writtenKind) crdName() string { return k.plural + "." + k.gvk.Group }

// written are the kinds Expand and Apply write, at the versions of the API
// packages they are built from.
var written = []writtenKind{
	{sourcev1.GroupVersion.WithKind(sourcev1.GitRepositoryKind), "gitrepositories", "source-controller"},
	{sourcev1.GroupVersion.WithKind(sourcev1.OCIRepositoryKind), "ocirepositories", "source-controller"},
	{sourcev1.GroupVersion.WithKind(sourcev1.HelmRepositoryKind), "helmrepositories", "source-controller"},
	{kustomizev1.GroupVersion.WithKind(kustomizev1.KustomizationKind), "kustomizations", "kustomize-controller"},
	{helmv2.GroupVersion.WithKind(helmv2.HelmReleaseKind), "helmreleases", "helm-controller"},
}

// CRDNames are the CustomResourceDefinitions an Inspector reads: whoever
// runs one needs `get` on customresourcedefinitions with these
// resourceNames, and nothing more.
func CRDNames() []string {
	names := make([]string, len(written))
	for i, k := range written {
		names[i] = k.crdName()
	}
	return names
}

// Compatibility says whether a cluster's Flux serves what fleeet writes, as
// the FluxCompatible condition states it.
type Compatibility struct {
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

// Inspector reads which Flux a cluster runs from the CRDs of the kinds
// fleeet writes. It is meant to be called often (on every heartbeat): each
// call reads only each CRD's metadata, a few hundred bytes, and the whole
// CRD, whose schemas run to tens of kilobytes, only when its resourceVersion
// moved since the last call. Reading by name needs `get` alone, where a
// watch would need list and watch, an informer per CRD and a connection held
// open for something that changes once an upgrade.
type Inspector struct {
	// Reader reads the cluster, uncached: a cached read of CRDs would
	// list and watch them all.
	Reader client.Reader
	// Describe words a failed read for the condition's message; nil keeps
	// the error as it is. The manager words a push cluster's answers
	// itself, never quoting them.
	Describe func(error) string

	mu   sync.Mutex
	seen map[string]crdFacts
}

// crdFacts is what an Inspector keeps of one CRD.
type crdFacts struct {
	resourceVersion string
	version         string
	served          []string
}

// crdState is what one call found of one CRD.
type crdState struct {
	facts   crdFacts
	missing bool
	err     error
}

// Inspect reads the CRDs and returns the Flux they describe and whether it
// serves every kind at the version fleeet writes. An unreadable CRD is not
// an error of Inspect: it makes the compatibility Unknown, saying why.
func (in *Inspector) Inspect(ctx context.Context) (fleeetv1.FluxStatus, Compatibility) {
	states := make([]crdState, len(written))
	for i, k := range written {
		states[i] = in.read(ctx, k.crdName())
	}
	for i := range states {
		if states[i].err != nil && in.Describe != nil {
			states[i].err = describedError(in.Describe(states[i].err))
		}
	}
	return versions(states), compatibility(states)
}

// describedError is an error as Inspector.Describe words it.
type describedError string

func (e describedError) Error() string { return string(e) }

// read returns one CRD's facts, fetching the whole CRD only when its
// metadata shows it changed since the facts were kept.
func (in *Inspector) read(ctx context.Context, name string) crdState {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := in.Reader.Get(ctx, client.ObjectKey{Name: name}, meta); err != nil {
		if apierrors.IsNotFound(err) {
			return crdState{missing: true}
		}
		return crdState{err: err}
	}
	in.mu.Lock()
	kept, ok := in.seen[name]
	in.mu.Unlock()
	if ok && kept.resourceVersion == meta.ResourceVersion {
		return crdState{facts: kept}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := in.Reader.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		if apierrors.IsNotFound(err) {
			return crdState{missing: true}
		}
		return crdState{err: err}
	}
	facts := crdFacts{resourceVersion: crd.ResourceVersion, version: crd.Labels[VersionLabel]}
	for _, v := range crd.Spec.Versions {
		if v.Served {
			facts.served = append(facts.served, v.Name)
		}
	}
	in.mu.Lock()
	if in.seen == nil {
		in.seen = map[string]crdFacts{}
	}
	in.seen[name] = facts
	in.mu.Unlock()
	return crdState{facts: facts}
}

// versions reports one version when every CRD present carries the same
// label, and each controller's otherwise. A controller whose CRDs disagree
// among themselves (an upgrade half done) shows all their versions.
func versions(states []crdState) fleeetv1.FluxStatus {
	byController := map[string][]string{}
	all := map[string]bool{}
	for i, st := range states {
		if st.missing || st.err != nil {
			continue
		}
		v := st.facts.version
		if v == "" {
			v = unknownVersion
		}
		c := written[i].controller
		if !slices.Contains(byController[c], v) {
			byController[c] = append(byController[c], v)
		}
		all[v] = true
	}
	switch len(all) {
	case 0:
		return fleeetv1.FluxStatus{}
	case 1:
		return fleeetv1.FluxStatus{Version: slices.Collect(maps.Keys(all))[0]}
	}
	st := fleeetv1.FluxStatus{Controllers: map[string]string{}}
	for c, vs := range byController {
		slices.Sort(vs)
		st.Controllers[c] = strings.Join(vs, "/")
	}
	return st
}

// compatibility judges the CRDs: a missing CRD outweighs one serving other
// versions, which outweighs one that could not be read.
func compatibility(states []crdState) Compatibility {
	var missing, incompatible, unreadable, fine []string
	for i, st := range states {
		k := written[i]
		wants := fmt.Sprintf("%s %s", k.gvk.Kind, k.gvk.GroupVersion())
		switch {
		case st.missing:
			missing = append(missing, fmt.Sprintf("CustomResourceDefinition %s is not installed (the agent writes %s; install Flux's %s)",
				k.crdName(), wants, k.controller))
		case st.err != nil:
			unreadable = append(unreadable, fmt.Sprintf("reading CustomResourceDefinition %s: %v", k.crdName(), st.err))
		case !slices.Contains(st.facts.served, k.gvk.Version):
			incompatible = append(incompatible, fmt.Sprintf("CustomResourceDefinition %s serves %s, not %s (the agent writes %s; upgrade Flux's %s)",
				k.crdName(), servedList(st.facts.served), k.gvk.Version, wants, k.controller))
		default:
			fine = append(fine, wants)
		}
	}
	switch {
	case len(missing) > 0:
		return Compatibility{metav1.ConditionFalse, fleeetv1.ReasonFluxMissing, strings.Join(append(missing, incompatible...), "; ")}
	case len(incompatible) > 0:
		return Compatibility{metav1.ConditionFalse, fleeetv1.ReasonFluxIncompatible, strings.Join(incompatible, "; ")}
	case len(unreadable) > 0:
		return Compatibility{metav1.ConditionUnknown, fleeetv1.ReasonFluxUnreadable, strings.Join(unreadable, "; ")}
	}
	return Compatibility{metav1.ConditionTrue, fleeetv1.ReasonFluxServed, "Flux serves " + strings.Join(fine, ", ")}
}

func servedList(served []string) string {
	if len(served) == 0 {
		return "no version"
	}
	return strings.Join(served, ", ")
}
