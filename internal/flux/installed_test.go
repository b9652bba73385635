package flux

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// crds are the states of the CRDs in written's order: GitRepository,
// OCIRepository (in the GitRepository's state: both are source-controller's
// and installed together), HelmRepository, Kustomization, HelmRelease.
func crds(gitRepo, helmRepo, kustomization, helmRelease crdState) []crdState {
	return []crdState{gitRepo, gitRepo, helmRepo, kustomization, helmRelease}
}

func serving(version string, served ...string) crdState {
	return crdState{facts: crdFacts{version: version, served: served}}
}

func TestVersionsAreOneWhenTheCRDsAgreeAndPerControllerWhenNot(t *testing.T) {
	cases := []struct {
		name   string
		states []crdState
		want   fleeetv1.FluxStatus
	}{
		{"flux install labels every CRD with the release",
			crds(serving("v2.7.3", "v1"), serving("v2.7.3", "v1"), serving("v2.7.3", "v1"), serving("v2.7.3", "v2")),
			fleeetv1.FluxStatus{Version: "v2.7.3"}},
		{"no label anywhere",
			crds(serving("", "v1"), serving("", "v1"), serving("", "v1"), serving("", "v2")),
			fleeetv1.FluxStatus{Version: "unknown"}},
		{"each controller labels its own CRDs",
			crds(serving("v1.9.6", "v1"), serving("v1.9.6", "v1"), serving("v1.9.5", "v1"), serving("v1.6.4", "v2")),
			fleeetv1.FluxStatus{Controllers: map[string]string{
				"source-controller": "v1.9.6", "kustomize-controller": "v1.9.5", "helm-controller": "v1.6.4"}}},
		{"an unlabelled controller among labelled ones",
			crds(serving("v1.9.6", "v1"), serving("v1.9.6", "v1"), serving("v1.9.5", "v1"), serving("", "v2")),
			fleeetv1.FluxStatus{Controllers: map[string]string{
				"source-controller": "v1.9.6", "kustomize-controller": "v1.9.5", "helm-controller": "unknown"}}},
		{"an upgrade half done within one controller",
			crds(serving("v1.9.6", "v1"), serving("v1.9.5", "v1"), serving("v1.9.5", "v1"), serving("v1.9.5", "v2")),
			fleeetv1.FluxStatus{Controllers: map[string]string{
				"source-controller": "v1.9.5/v1.9.6", "kustomize-controller": "v1.9.5", "helm-controller": "v1.9.5"}}},
		{"missing CRDs count for nothing",
			crds(serving("v2.7.3", "v1"), serving("v2.7.3", "v1"), serving("v2.7.3", "v1"), crdState{missing: true}),
			fleeetv1.FluxStatus{Version: "v2.7.3"}},
		{"no Flux at all",
			crds(crdState{missing: true}, crdState{missing: true}, crdState{missing: true}, crdState{missing: true}),
			fleeetv1.FluxStatus{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(versions(c.states)).To(Equal(c.want))
		})
	}
}

func TestCompatibilityNamesTheCRDAndTheVersions(t *testing.T) {
	all := crds(serving("", "v1"), serving("", "v1"), serving("", "v1"), serving("", "v2"))
	cases := []struct {
		name   string
		states []crdState
		want   Compatibility
	}{
		{"every kind served", all, Compatibility{metav1.ConditionTrue, fleeetv1.ReasonFluxServed,
			"Flux serves GitRepository source.toolkit.fluxcd.io/v1, OCIRepository source.toolkit.fluxcd.io/v1, HelmRepository source.toolkit.fluxcd.io/v1, " +
				"Kustomization kustomize.toolkit.fluxcd.io/v1, HelmRelease helm.toolkit.fluxcd.io/v2"}},
		{"older versions served too", crds(serving("", "v1beta2", "v1"), serving("", "v1"), serving("", "v1"), serving("", "v2beta2", "v2")),
			Compatibility{metav1.ConditionTrue, fleeetv1.ReasonFluxServed,
				"Flux serves GitRepository source.toolkit.fluxcd.io/v1, OCIRepository source.toolkit.fluxcd.io/v1, HelmRepository source.toolkit.fluxcd.io/v1, " +
					"Kustomization kustomize.toolkit.fluxcd.io/v1, HelmRelease helm.toolkit.fluxcd.io/v2"}},
		{"a version not served", crds(serving("", "v1"), serving("", "v1"), serving("", "v1"), serving("", "v2beta1", "v2beta2")),
			Compatibility{metav1.ConditionFalse, fleeetv1.ReasonFluxIncompatible,
				"CustomResourceDefinition helmreleases.helm.toolkit.fluxcd.io serves v2beta1, v2beta2, not v2 " +
					"(the agent writes HelmRelease helm.toolkit.fluxcd.io/v2; upgrade Flux's helm-controller)"}},
		{"a CRD serving nothing", crds(serving("", "v1"), serving("", "v1"), serving(""), serving("", "v2")),
			Compatibility{metav1.ConditionFalse, fleeetv1.ReasonFluxIncompatible,
				"CustomResourceDefinition kustomizations.kustomize.toolkit.fluxcd.io serves no version, not v1 " +
					"(the agent writes Kustomization kustomize.toolkit.fluxcd.io/v1; upgrade Flux's kustomize-controller)"}},
		{"a CRD missing outweighs one incompatible", crds(serving("", "v1"), crdState{missing: true}, serving("", "v1"), serving("", "v2beta2")),
			Compatibility{metav1.ConditionFalse, fleeetv1.ReasonFluxMissing,
				"CustomResourceDefinition helmrepositories.source.toolkit.fluxcd.io is not installed " +
					"(the agent writes HelmRepository source.toolkit.fluxcd.io/v1; install Flux's source-controller); " +
					"CustomResourceDefinition helmreleases.helm.toolkit.fluxcd.io serves v2beta2, not v2 " +
					"(the agent writes HelmRelease helm.toolkit.fluxcd.io/v2; upgrade Flux's helm-controller)"}},
		{"an unreadable CRD leaves it unknown", crds(serving("", "v1"), serving("", "v1"), crdState{err: errors.New("forbidden")}, serving("", "v2")),
			Compatibility{metav1.ConditionUnknown, fleeetv1.ReasonFluxUnreadable,
				"reading CustomResourceDefinition kustomizations.kustomize.toolkit.fluxcd.io: forbidden"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(compatibility(c.states)).To(Equal(c.want))
		})
	}
}
