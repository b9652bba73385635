package compile_test

import (
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
)

// helmModule is a Module installing a chart with values.
func helmModule(values string) *fleeetv1.Module {
	m := module("app", "v1", nil)
	m.Spec.Sync = fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "app", Version: "1.0.0"}},
		Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{Values: &apiextensionsv1.JSON{Raw: []byte(values)}}},
	}
	return m
}

func region(name string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{"region": name}}
}

func helmOverride(name string, sel metav1.LabelSelector, values string) fleeetv1.Override {
	return fleeetv1.Override{Name: name, Selector: sel, Helm: &fleeetv1.HelmOverride{Values: &apiextensionsv1.JSON{Raw: []byte(values)}}}
}

// Every override that picks a Remote applies, in list order: objects merge
// key by key, a later scalar or list wins, null deletes, and a Remote no
// override picks gets the sync as written. Overrides see control-plane
// bindings.
func TestHelmOverridesDeepMergeInListOrder(t *testing.T) {
	m := helmModule(`{"ui":{"message":"hello","color":"blue"},"replicas":1,"tags":["a"],"debug":true}`)
	m.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{{Name: "ZONE", Value: ptr.To("z1")}}
	m.Spec.Overrides = []fleeetv1.Override{
		helmOverride("eu", region("eu"), `{"ui":{"message":"hello from eu $(ZONE)"},"tags":["eu"]}`),
		helmOverride("prod", metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}, `{"ui":{"message":"prod"},"replicas":3,"debug":null}`),
	}
	cases := []struct {
		labels  map[string]string
		matched []string
		values  string
	}{
		{nil, nil, `{"debug":true,"replicas":1,"tags":["a"],"ui":{"color":"blue","message":"hello"}}`},
		{map[string]string{"region": "eu"}, []string{"eu"}, `{"debug":true,"replicas":1,"tags":["eu"],"ui":{"color":"blue","message":"hello from eu z1"}}`},
		{map[string]string{"region": "eu", "env": "prod"}, []string{"eu", "prod"}, `{"replicas":3,"tags":["eu"],"ui":{"color":"blue","message":"prod"}}`},
	}
	for _, tc := range cases {
		g := NewWithT(t)
		before := m.DeepCopy()
		remote := edge("edge-1", tc.labels)
		picked, err := compile.Matching(m.Spec.Overrides, remote)
		g.Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, o := range picked {
			names = append(names, o.Name)
		}
		g.Expect(names).To(Equal(tc.matched))
		sync, err := compile.Sync(t.Context(), nil, m, &m.Spec.SyncPlacement, remote)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(sync.Package.Helm.Values.Raw).To(MatchJSON(tc.values), "labels %v", tc.labels)
		g.Expect(m).To(Equal(before), "the Module is unchanged")
	}
}

// Kustomize overrides append patches after the sync's, replace images by
// name and substitute values by key, and share nothing with the Module.
func TestKustomizeOverridesAppendPatchesAndReplaceImagesAndSubstitutes(t *testing.T) {
	g := NewWithT(t)
	m := module("app", "v1", nil)
	k := m.Spec.Sync.Package.Kustomize
	k.Patches = []fleeetv1.KustomizePatch{{Patch: "base"}}
	k.Images = []fleeetv1.KustomizeImage{{Name: "web", NewTag: "1"}, {Name: "db", NewTag: "5"}}
	k.Substitute = map[string]string{"SIZE": "s", "COLOR": "blue"}
	m.Spec.Overrides = []fleeetv1.Override{
		{Name: "eu", Selector: region("eu"), Kustomize: &fleeetv1.KustomizeOverride{
			Patches:    []fleeetv1.KustomizePatch{{Patch: "eu", Target: &fleeetv1.PatchTarget{Kind: "Deployment"}}},
			Images:     []fleeetv1.KustomizeImage{{Name: "web", NewTag: "2"}, {Name: "cache", NewTag: "7"}},
			Substitute: map[string]string{"SIZE": "l"},
		}},
		{Name: "all", Selector: metav1.LabelSelector{}, Kustomize: &fleeetv1.KustomizeOverride{
			Patches: []fleeetv1.KustomizePatch{{Patch: "all"}},
		}},
	}
	before := m.DeepCopy()
	sync, err := compile.Sync(t.Context(), nil, m, &m.Spec.SyncPlacement, edge("edge-1", map[string]string{"region": "eu"}))
	g.Expect(err).NotTo(HaveOccurred())
	got := sync.Package.Kustomize
	g.Expect(got.Patches).To(HaveLen(3))
	g.Expect([]string{got.Patches[0].Patch, got.Patches[1].Patch, got.Patches[2].Patch}).To(Equal([]string{"base", "eu", "all"}))
	g.Expect(got.Images).To(Equal([]fleeetv1.KustomizeImage{{Name: "web", NewTag: "2"}, {Name: "db", NewTag: "5"}, {Name: "cache", NewTag: "7"}}))
	g.Expect(got.Substitute).To(Equal(map[string]string{"SIZE": "l", "COLOR": "blue"}))

	got.Patches[1].Target.Kind = "changed"
	g.Expect(m).To(Equal(before), "the sync shares nothing with the Module")
}

// An override's selector that does not parse, or an override of the wrong
// kind stored before admission refused it, fails the compile naming it.
func TestABadOverrideIsReportedByName(t *testing.T) {
	g := NewWithT(t)
	m := helmModule(`{}`)
	m.Spec.Overrides = []fleeetv1.Override{{Name: "odd", Selector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "region", Operator: "Near"}}}, Helm: &fleeetv1.HelmOverride{}}}
	_, err := compile.Sync(t.Context(), nil, m, &m.Spec.SyncPlacement, edge("edge-1", nil))
	g.Expect(err).To(MatchError(ContainSubstring("spec.overrides[odd].selector")))

	m.Spec.Overrides = []fleeetv1.Override{{Name: "wrong", Selector: metav1.LabelSelector{}, Kustomize: &fleeetv1.KustomizeOverride{}}}
	_, err = compile.Sync(t.Context(), nil, m, &m.Spec.SyncPlacement, edge("edge-1", nil))
	g.Expect(err).To(MatchError(ContainSubstring("spec.overrides[wrong]: its kind does not match")))
}

// The revision covers the overrides, so a change to one rolls out, and a
// Module without overrides keeps the revision it had before they existed.
func TestRevisionCoversOverrides(t *testing.T) {
	g := NewWithT(t)
	m := helmModule(`{}`)
	plain := compile.ModuleRevision(m)
	g.Expect(plain).To(Equal(compile.Revision(&m.Spec.Sync, nil, nil)))
	g.Expect(plain).To(Equal("33a8a712e6"), "the revision main computed before overrides existed")
	m.Spec.Overrides = []fleeetv1.Override{helmOverride("eu", region("eu"), `{"a":1}`)}
	first := compile.ModuleRevision(m)
	m.Spec.Overrides[0].Helm.Values.Raw = []byte(`{"a":2}`)
	g.Expect(first).NotTo(Equal(plain))
	g.Expect(compile.ModuleRevision(m)).NotTo(Equal(first))
}

// A kustomize override's path replaces the sync's for the Remotes it picks
// only, a later override's path winning and an override without one
// keeping the path chosen so far; a path change moves the revision, so it
// rolls out like a version.
func TestKustomizeOverridePathAppliesToPickedRemotesLaterWins(t *testing.T) {
	m := module("app", "v1", nil)
	m.Spec.Overrides = []fleeetv1.Override{
		{Name: "eu", Selector: region("eu"), Kustomize: &fleeetv1.KustomizeOverride{Path: "./deploy/overlays/eu"}},
		{Name: "prod", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			Kustomize: &fleeetv1.KustomizeOverride{Path: "./deploy/overlays/prod"}},
		{Name: "tag", Selector: metav1.LabelSelector{}, Kustomize: &fleeetv1.KustomizeOverride{Substitute: map[string]string{"A": "b"}}},
	}
	cases := []struct {
		labels map[string]string
		path   string
	}{
		{nil, "./deploy"},
		{map[string]string{"region": "us"}, "./deploy"},
		{map[string]string{"region": "eu"}, "./deploy/overlays/eu"},
		{map[string]string{"env": "prod"}, "./deploy/overlays/prod"},
		{map[string]string{"region": "eu", "env": "prod"}, "./deploy/overlays/prod"},
	}
	for _, tc := range cases {
		g := NewWithT(t)
		before := m.DeepCopy()
		sync, err := compile.Sync(t.Context(), nil, m, &m.Spec.SyncPlacement, edge("edge-1", tc.labels))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(sync.Package.Kustomize.Path).To(Equal(tc.path), "labels %v", tc.labels)
		g.Expect(sync.Source).To(Equal(m.Spec.Sync.Source), "the same source and version")
		g.Expect(m).To(Equal(before), "the Module is unchanged")
	}

	g := NewWithT(t)
	first := compile.ModuleRevision(m)
	m.Spec.Overrides[0].Kustomize.Path = "./deploy/overlays/eu-west"
	g.Expect(compile.ModuleRevision(m)).NotTo(Equal(first), "a path change rolls out")
}
