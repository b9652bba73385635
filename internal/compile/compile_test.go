package compile_test

import (
	"encoding/json"
	"errors"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/bindings"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/flux"
)

// TestControlPlaneValuesReachDownstreamLiterally compiles a Module as the
// manager does and expands the result as the agent does: a control-plane
// value, or a $$( escape, must arrive as literal text, never as a mention
// the agent resolves against the cluster's own bindings.
func TestControlPlaneValuesReachDownstreamLiterally(t *testing.T) {
	remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Namespace: "team-a",
		Labels:      map[string]string{"region": "eu"},
		Annotations: map[string]string{"note": "cost $(TOKEN)", "price": "5$"},
	}}
	owner := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"}}
	// What the agent's sync bindings resolve to downstream.
	downstream := map[string]string{"TOKEN": "s3cr3t", "ZONE": "eu-1a"}

	cases := []struct {
		name     string
		template string
		want     string
	}{
		{"control-plane value", "region=$(REGION)", "region=eu"},
		{"downstream mention left for the agent", "zone=$(ZONE)", "zone=eu-1a"},
		{"control-plane value holding a mention", "note=$(NOTE)", "note=cost $(TOKEN)"},
		{"literal binding holding an escaped mention", "literal=$(LITERAL)", "literal=$(TOKEN)"},
		{"escape in the Module", "escaped=$$(TOKEN)", "escaped=$(TOKEN)"},
		{"escape next to a control-plane value", "$(REGION)$$(ZONE)", "eu$(ZONE)"},
		{"control-plane value ending in $ before (", "$(PRICE)(TOKEN)", "5$(TOKEN)"},
		{"unknown mention", "$(NOBODY) stays", "$(NOBODY) stays"},
	}
	placement := func(template string) *fleeetv1.SyncPlacement {
		return &fleeetv1.SyncPlacement{
			ControlPlaneBindings: []fleeetv1.ControlPlaneBinding{
				{Name: "REGION", ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "Remote", FieldPath: "/metadata/labels/region"}},
				{Name: "NOTE", ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "Remote", FieldPath: "/metadata/annotations/note"}},
				{Name: "PRICE", ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "Remote", FieldPath: "/metadata/annotations/price"}},
				{Name: "LITERAL", Value: ptr.To("$$(TOKEN)")},
			},
			Sync: fleeetv1.SyncSpec{
				Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{
					Path: "./deploy", Substitute: map[string]string{"v": template},
				}},
				Bindings: []fleeetv1.Binding{{Name: "DERIVED", Value: ptr.To(template)}},
			},
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := placement(tc.template)
			sync, err := compile.Sync(t.Context(), nil, owner, p, remote)
			g.Expect(err).NotTo(HaveOccurred())

			// A kustomize substitute, as the agent expands it.
			x, err := flux.Expand(flux.Target{Owner: "plan", Namespace: "team-a"}, &sync, downstream, nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(x.Applier.(*kustomizev1.Kustomization).Spec.PostBuild.Substitute).To(HaveKeyWithValue("v", tc.want))

			// A downstream binding's literal value, as the agent resolves it.
			g.Expect(bindings.Expand(*sync.Bindings[0].Value, downstream)).To(Equal(tc.want))

			// A string in helm values, as the agent expands it.
			raw, _ := json.Marshal(map[string]any{"nested": map[string]any{"v": tc.template}})
			p.Sync.Source = fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "app", Version: "1.0.0"}}
			p.Sync.Package = fleeetv1.Package{Helm: &fleeetv1.HelmPackage{Values: &apiextensionsv1.JSON{Raw: raw}}}
			sync, err = compile.Sync(t.Context(), nil, owner, p, remote)
			g.Expect(err).NotTo(HaveOccurred())
			x, err = flux.Expand(flux.Target{Owner: "plan", Namespace: "team-a"}, &sync, downstream, nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(x.Applier.(*helmv2.HelmRelease).Spec.Values.Raw).To(MatchJSON(mustJSON(map[string]any{"nested": map[string]any{"v": tc.want}})))
		})
	}
}

func TestSelectsNoRemoteWithoutASelectorAndEveryRemoteWithAnEmptyOne(t *testing.T) {
	prod := edge("edge-1", map[string]string{"env": "prod", "region": "eu"})
	for name, tc := range map[string]struct {
		selector *metav1.LabelSelector
		want     bool
	}{
		"absent selects none":         {nil, false},
		"empty selects all":           {&metav1.LabelSelector{}, true},
		"matching labels":             {&metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}, true},
		"one label differs":           {&metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod", "region": "us"}}, false},
		"label the Remote lacks":      {&metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}, false},
		"expression In":               {expr("region", metav1.LabelSelectorOpIn, "eu", "us"), true},
		"expression NotIn":            {expr("region", metav1.LabelSelectorOpNotIn, "eu"), false},
		"expression DoesNotExist":     {expr("tier", metav1.LabelSelectorOpDoesNotExist), true},
		"expression Exists, no label": {expr("tier", metav1.LabelSelectorOpExists), false},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := compile.Selects(tc.selector, prod)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestSelectsNamesTheFieldOfAnInvalidSelector(t *testing.T) {
	g := NewWithT(t)
	_, err := compile.Selects(expr("env", "Near", "prod"), edge("edge-1", nil))
	g.Expect(err).To(MatchError(HavePrefix("spec.selector: ")))
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func TestSyncResolvesControlPlaneBindingsForEachRemote(t *testing.T) {
	remote := edge("edge-1", map[string]string{"region": "eu", "env": "prod"})
	remote.Status.AgentVersion = "v0.3.1"
	reader := configMaps(map[string]map[string]string{"fleet": {"domain": "example.com"}})
	field := func(kind, name, path string) *fleeetv1.ControlPlaneFieldRef {
		return &fleeetv1.ControlPlaneFieldRef{Kind: kind, Name: name, FieldPath: path}
	}
	for name, tc := range map[string]struct {
		bindings []fleeetv1.ControlPlaneBinding
		template string
		want     string
	}{
		"a Remote label": {
			[]fleeetv1.ControlPlaneBinding{{Name: "REGION", ObjectFieldRef: field("Remote", "", "/metadata/labels/region")}},
			"$(REGION)", "eu"},
		"a Remote status field": {
			[]fleeetv1.ControlPlaneBinding{{Name: "AGENT", ObjectFieldRef: field("Remote", "", "/status/agentVersion")}},
			"agent $(AGENT)", "agent v0.3.1"},
		"a ConfigMap key": {
			[]fleeetv1.ControlPlaneBinding{{Name: "DOMAIN", ObjectFieldRef: field("ConfigMap", "fleet", "/data/domain")}},
			"app.$(DOMAIN)", "app.example.com"},
		"a field that is not a string, as JSON": {
			[]fleeetv1.ControlPlaneBinding{{Name: "LABELS", ObjectFieldRef: field("Remote", "", "/metadata/labels")}},
			"$(LABELS)", `{"env":"prod","region":"eu"}`},
		"a value built from earlier bindings": {
			[]fleeetv1.ControlPlaneBinding{
				{Name: "REGION", ObjectFieldRef: field("Remote", "", "/metadata/labels/region")},
				{Name: "DOMAIN", ObjectFieldRef: field("ConfigMap", "fleet", "/data/domain")},
				{Name: "HOST", Value: ptr.To("$(REGION).$(DOMAIN)")},
			},
			"$(HOST)", "eu.example.com"},
		"a value does not see later bindings": {
			[]fleeetv1.ControlPlaneBinding{
				{Name: "HOST", Value: ptr.To("$(REGION).example.com")},
				{Name: "REGION", ObjectFieldRef: field("Remote", "", "/metadata/labels/region")},
			},
			"$(HOST)", "$(REGION).example.com"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := module("app", "v1.0.0", nil)
			m.Spec.ControlPlaneBindings = tc.bindings
			m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"v": tc.template}
			sync, err := compile.Sync(t.Context(), reader, m, &m.Spec.SyncPlacement, remote)
			g.Expect(err).NotTo(HaveOccurred())
			// What the agent's expansion yields, with no bindings of its own.
			g.Expect(bindings.Expand(sync.Package.Kustomize.Substitute["v"], nil)).To(Equal(tc.want))
		})
	}
}

func TestSyncNamesTheBindingThatCannotBeResolved(t *testing.T) {
	reader := configMaps(map[string]map[string]string{"fleet": {"domain": "example.com"}})
	for name, tc := range map[string]struct {
		ref  fleeetv1.ControlPlaneFieldRef
		want string
	}{
		"a ConfigMap that does not exist": {fleeetv1.ControlPlaneFieldRef{Kind: "ConfigMap", Name: "missing", FieldPath: "/data/domain"},
			"spec.controlPlaneBindings[X]: reading ConfigMap missing: "},
		"a ConfigMap key that does not exist": {fleeetv1.ControlPlaneFieldRef{Kind: "ConfigMap", Name: "fleet", FieldPath: "/data/nothing"},
			"spec.controlPlaneBindings[X]: ConfigMap fleet: "},
		"a Remote field that does not exist": {fleeetv1.ControlPlaneFieldRef{Kind: "Remote", FieldPath: "/metadata/labels/zone"},
			"spec.controlPlaneBindings[X]: Remote edge-1: "},
		"a Secret": {fleeetv1.ControlPlaneFieldRef{Kind: "Secret", Name: "fleet", FieldPath: "/data/password"},
			`spec.controlPlaneBindings[X]: objectFieldRef.kind "Secret" is not Remote or ConfigMap; Secrets are never read in the management cluster`},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := module("app", "v1.0.0", nil)
			m.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{{Name: "X", ObjectFieldRef: &tc.ref}}
			_, err := compile.Sync(t.Context(), reader, m, &m.Spec.SyncPlacement, edge("edge-1", nil))
			g.Expect(err).To(MatchError(HavePrefix(tc.want)))
			var be *bindings.Error
			g.Expect(errors.As(err, &be)).To(BeTrue(), "a *bindings.Error, which the compiler reports without retrying")
			g.Expect(be.Path).To(Equal("spec.controlPlaneBindings[X]"))
		})
	}
}

// The compiler passes Modules straight from the cache: compiling must leave
// the Module as it found it, and the sync must share nothing with it.
func TestSyncNeitherChangesNorSharesItsOwner(t *testing.T) {
	g := NewWithT(t)
	m := module("app", "v1.0.0", map[string]string{"tier": "app"})
	m.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{{Name: "REGION", Value: ptr.To("eu")}}
	m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"region": "$(REGION)"}
	m.Spec.Sync.Bindings = []fleeetv1.Binding{{Name: "ZONE", Value: ptr.To("$(REGION)-1a")}}
	before := m.DeepCopy()

	sync, err := compile.Sync(t.Context(), nil, m, &m.Spec.SyncPlacement, edge("edge-1", nil))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(Equal(before), "the Module is unchanged")
	g.Expect(sync.Name).To(Equal("app"))
	g.Expect(sync.Labels).To(Equal(map[string]string{"tier": "app"}))
	g.Expect(sync.Package.Kustomize.Substitute).To(HaveKeyWithValue("region", "eu"))
	g.Expect(*sync.Bindings[0].Value).To(Equal("eu-1a"))

	sync.Labels["tier"] = "changed"
	sync.Source.Git.Tag = "v9"
	g.Expect(m).To(Equal(before), "the sync shares no map or pointer with the Module")
}

// A stored plan omits empty maps, so a Module without labels must compile
// to a sync whose labels are nil, or every compile would differ from the
// plan it reads back and write it again.
func TestSyncOfAnUnlabelledOwnerHasNilLabels(t *testing.T) {
	g := NewWithT(t)
	m := module("app", "v1.0.0", map[string]string{})
	sync, err := compile.Sync(t.Context(), nil, m, &m.Spec.SyncPlacement, edge("edge-1", nil))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sync.Labels).To(BeNil())
}

func TestChooseNeverMovesARemoteBeforeItsTurn(t *testing.T) {
	rolling := func(rollout *fleeetv1.RolloutStatus) *fleeetv1.Module {
		m := module("app", "v2.0.0", nil)
		m.Generation = 2
		m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
		m.Status.Rollout = rollout
		return m
	}
	held, desired := named("app", "v1.0.0"), named("app", "v2.0.0")
	for name, tc := range map[string]struct {
		module  *fleeetv1.Module
		current *fleeetv1.NamedSync
		want    *fleeetv1.NamedSync
	}{
		"a Remote holding nothing gets the new version": {rolling(nil), nil, desired},
		"AllAtOnce moves every Remote":                  {module("app", "v2.0.0", nil), held, desired},
		"a Remote already holding it keeps it":          {rolling(nil), named("app", "v2.0.0"), desired},
		"no rollout admitted anyone yet":                {rolling(nil), held, held},
		"the rollout admits this Remote":                {rolling(&fleeetv1.RolloutStatus{Revision: "r2", Admitted: []string{"edge-2", "edge-1"}}), held, desired},
		"the rollout admits other Remotes":              {rolling(&fleeetv1.RolloutStatus{Revision: "r2", Admitted: []string{"edge-2"}}), held, held},
		"an admission for an earlier revision":          {rolling(&fleeetv1.RolloutStatus{Revision: "r1", Admitted: []string{"edge-1"}}), held, held},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(compile.Choose(tc.module, "edge-1", "r2", tc.current, desired)).To(BeIdenticalTo(tc.want))
		})
	}
}

func TestChooseBackNeverMovesARemoteForward(t *testing.T) {
	older, good, failed := named("app", "v0.9.0"), named("app", "v1.0.0"), named("app", "v2.0.0")
	for name, tc := range map[string]struct {
		current, want *fleeetv1.NamedSync
	}{
		"a Remote on the failed version goes back":       {named("app", "v2.0.0"), good},
		"a Remote holding nothing gets the good version": {nil, good},
		"a Remote on the good version keeps it":          {named("app", "v1.0.0"), named("app", "v1.0.0")},
		"a Remote on an older version keeps it":          {older, older},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(compile.ChooseBack(tc.current, failed, good)).To(Equal(tc.want))
		})
	}
}

func TestRevisionNamesTheSyncAndItsBindingsOnly(t *testing.T) {
	g := NewWithT(t)
	m := module("app", "v1.0.0", nil)
	r := compile.ModuleRevision(m)
	g.Expect(r).To(HaveLen(10))
	m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
	m.Spec.Rollout.Paused = true
	m.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	g.Expect(compile.ModuleRevision(m)).To(Equal(r), "how and where it rolls out is not what it rolls out")
	m.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{{Name: "X", Value: ptr.To("1")}}
	g.Expect(compile.ModuleRevision(m)).NotTo(Equal(r))
	m.Spec.ControlPlaneBindings = nil
	m.Spec.Sync.Source.Git.Tag = "v1.0.1"
	g.Expect(compile.ModuleRevision(m)).NotTo(Equal(r))
}

func TestRolledBackToFindsTheRecordOfTheCurrentRevision(t *testing.T) {
	g := NewWithT(t)
	m := module("app", "v2.0.0", nil)
	rev := compile.ModuleRevision(m)
	good := fleeetv1.RolloutRecord{Revision: "good", Version: "v1.0.0", Outcome: fleeetv1.RolloutSucceeded}
	m.Status.History = []fleeetv1.RolloutRecord{good}
	g.Expect(compile.RolledBackTo(m, rev)).To(BeNil(), "no rollback recorded")
	m.Status.Rollout = &fleeetv1.RolloutStatus{Revision: rev, RolledBack: &fleeetv1.Rollback{To: "good"}}
	g.Expect(compile.RolledBackTo(m, rev)).To(Equal(&good))
	g.Expect(compile.RolledBackTo(m, "newer")).To(BeNil(), "a rollback holds only for its own revision")
}

func TestSameAndFindCompareWholeSyncsByName(t *testing.T) {
	g := NewWithT(t)
	labelled := named("app", "v1.0.0")
	labelled.Labels = map[string]string{"tier": "app"}
	g.Expect(compile.Same(named("app", "v1.0.0"), named("app", "v1.0.0"))).To(BeTrue())
	g.Expect(compile.Same(named("app", "v1.0.0"), named("app", "v2.0.0"))).To(BeFalse())
	g.Expect(compile.Same(named("app", "v1.0.0"), labelled)).To(BeFalse(), "labels are part of the sync")
	g.Expect(compile.Same(nil, nil)).To(BeFalse(), "nothing held is never the same as nothing compiled")
	g.Expect(compile.Same(named("app", "v1.0.0"), nil)).To(BeFalse())

	syncs := []fleeetv1.NamedSync{*named("app", "v1.0.0"), *named("db", "v3.0.0")}
	g.Expect(compile.Find(syncs, "db")).To(BeIdenticalTo(&syncs[1]))
	g.Expect(compile.Find(syncs, "cache")).To(BeNil())
	g.Expect(compile.Find(nil, "app")).To(BeNil())
}

func TestVersionIsTheExactVersionASyncPins(t *testing.T) {
	for name, tc := range map[string]struct {
		source fleeetv1.Source
		want   string
	}{
		"a git tag":                {fleeetv1.Source{Git: &fleeetv1.GitSource{Tag: "v1.2.3", Revision: "abc123"}}, "v1.2.3"},
		"a git commit without tag": {fleeetv1.Source{Git: &fleeetv1.GitSource{Revision: "abc123"}}, "abc123"},
		"a chart version":          {fleeetv1.Source{Helm: &fleeetv1.HelmSource{Chart: "app", Version: "4.5.6"}}, "4.5.6"},
		"an OCI tag":               {fleeetv1.Source{OCI: &fleeetv1.OCISource{Tag: "7.8.9"}}, "7.8.9"},
		"an OCI digest":            {fleeetv1.Source{OCI: &fleeetv1.OCISource{Digest: "sha256:0123"}}, "sha256:0123"},
		"no source":                {fleeetv1.Source{}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(compile.Version(&fleeetv1.SyncSpec{Source: tc.source})).To(Equal(tc.want))
		})
	}
}
