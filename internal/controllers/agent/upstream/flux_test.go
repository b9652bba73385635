package upstream_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	gtypes "github.com/onsi/gomega/types"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/flux"
)

// labelFluxCRDs sets labels on each CRD of a kind fleeet writes, as Flux's
// installers do; labelsOf gives them by CRD name. The package's tests share
// the CRDs: each gets its labels back when the test ends.
func labelFluxCRDs(t *testing.T, l *linked, labelsOf func(crd string) map[string]string) {
	t.Helper()
	for _, name := range flux.CRDNames() {
		was := setCRDLabels(t, l, name, labelsOf(name))
		t.Cleanup(func() { setCRDLabels(t, l, name, was) })
	}
}

// setCRDLabels replaces the labels of the CRD name and returns those it had.
func setCRDLabels(t *testing.T, l *linked, name string, labels map[string]string) map[string]string {
	t.Helper()
	g := NewWithT(t)
	// Not t.Context(): it is over by the time cleanups put labels back.
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(l.down.Client.Get(ctx, client.ObjectKey{Name: name}, crd)).To(Succeed())
	was := crd.Labels
	crd.Labels = labels
	g.Expect(l.down.Client.Update(ctx, crd)).To(Succeed())
	return was
}

// remoteFlux is the Remote's report of the cluster's Flux and its
// FluxCompatible condition.
func (l *linked) remoteFlux(g Gomega) (*fleeetv1.FluxStatus, *metav1.Condition) {
	remote := &fleeetv1.Remote{}
	g.Expect(l.mgmt.Client.Get(context.Background(), client.ObjectKey{Namespace: l.ns, Name: clusterName}, remote)).To(Succeed())
	return remote.Status.Flux, apimeta.FindStatusCondition(remote.Status.Conditions, fleeetv1.FluxCompatibleCondition)
}

// The agent reports the Flux it finds on the Remote, read from the labels
// `flux install` and per-controller installs put on the CRDs, and follows
// an upgrade in place without a restart.
func TestTheRemoteShowsTheClustersFluxAndItsUpgrades(t *testing.T) {
	g := NewWithT(t)
	l := link(t)
	reports := func(want fleeetv1.FluxStatus) func(g Gomega) {
		return func(g Gomega) {
			got, compatible := l.remoteFlux(g)
			g.Expect(got).To(HaveValue(Equal(want)))
			g.Expect(compatible).NotTo(BeNil())
			g.Expect(compatible.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(compatible.Reason).To(Equal(fleeetv1.ReasonFluxServed))
			g.Expect(l.condition(g, fleeetv1.FluxCompatibleCondition).Reason).To(Equal(fleeetv1.ReasonFluxServed))
			g.Expect(l.up.Status.Flux).To(HaveValue(Equal(want)), "the Upstream shows it downstream")
		}
	}
	// The test cluster's CRDs come from Flux's Go modules, unlabelled.
	g.Eventually(reports(fleeetv1.FluxStatus{Version: "unknown"}), timeout, poll).Should(Succeed())

	labelFluxCRDs(t, l, func(string) map[string]string {
		return map[string]string{flux.VersionLabel: "v2.7.3", "app.kubernetes.io/part-of": "flux"}
	})
	g.Eventually(reports(fleeetv1.FluxStatus{Version: "v2.7.3"}), timeout, poll).Should(Succeed())

	controllerVersions := map[string]string{
		"gitrepositories.source.toolkit.fluxcd.io":   "v1.9.6",
		"ocirepositories.source.toolkit.fluxcd.io":   "v1.9.6",
		"helmrepositories.source.toolkit.fluxcd.io":  "v1.9.6",
		"kustomizations.kustomize.toolkit.fluxcd.io": "v1.9.5",
		"helmreleases.helm.toolkit.fluxcd.io":        "v1.6.4",
	}
	labelFluxCRDs(t, l, func(crd string) map[string]string {
		return map[string]string{flux.VersionLabel: controllerVersions[crd], "app.kubernetes.io/part-of": "flux"}
	})
	g.Eventually(reports(fleeetv1.FluxStatus{Controllers: map[string]string{
		"source-controller": "v1.9.6", "kustomize-controller": "v1.9.5", "helm-controller": "v1.6.4",
	}}), timeout, poll).Should(Succeed())
}

// A CRD that stops serving the version the agent writes is said on the
// Upstream, in a Warning event and on the Remote, naming the CRD and the
// versions; the plan stays mirrored, and serving it again clears it.
func TestAFluxCRDWithoutTheVersionWrittenIsReported(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	l := link(t)
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))
	g.Eventually(func(g Gomega) {
		_, compatible := l.remoteFlux(g)
		g.Expect(compatible).To(HaveValue(HaveField("Status", metav1.ConditionTrue)))
	}, timeout, poll).Should(Succeed())

	// helm-controller's CRD as an old Flux had it: v2beta2 only.
	crd := &apiextensionsv1.CustomResourceDefinition{}
	key := client.ObjectKey{Name: "helmreleases.helm.toolkit.fluxcd.io"}
	g.Expect(l.down.Client.Get(ctx, key, crd)).To(Succeed())
	crd.Spec.Versions[0].Served = false
	crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
		Name: "v2beta2", Served: true, Schema: &apiextensionsv1.CustomResourceValidation{
			OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}},
	})
	g.Expect(l.down.Client.Update(ctx, crd)).To(Succeed())

	const message = "CustomResourceDefinition helmreleases.helm.toolkit.fluxcd.io serves v2beta2, not v2 " +
		"(the agent writes HelmRelease helm.toolkit.fluxcd.io/v2; upgrade Flux's helm-controller)"
	incompatible := And(HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", fleeetv1.ReasonFluxIncompatible), HaveField("Message", message))
	g.Eventually(func(g Gomega) {
		g.Expect(l.condition(g, fleeetv1.FluxCompatibleCondition)).To(incompatible)
		_, compatible := l.remoteFlux(g)
		g.Expect(compatible).To(HaveValue(incompatible), "the manager side sees it")
		g.Expect(upstreamEvents(g, l)).To(ContainElement(event("Warning", fleeetv1.ReasonFluxIncompatible, message)))
	}, timeout, poll).Should(Succeed())
	g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced), "the plan is still mirrored")
	g.Expect(l.mirroredTag(g)).To(Equal("v1.0.0"))

	g.Expect(l.down.Client.Get(ctx, key, crd)).To(Succeed())
	crd.Spec.Versions[0].Served = true
	g.Expect(l.down.Client.Update(ctx, crd)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(l.condition(g, fleeetv1.FluxCompatibleCondition).Reason).To(Equal(fleeetv1.ReasonFluxServed))
		_, compatible := l.remoteFlux(g)
		g.Expect(compatible).To(HaveValue(HaveField("Reason", fleeetv1.ReasonFluxServed)))
		g.Expect(upstreamEvents(g, l)).To(ContainElement(event("Normal", fleeetv1.ReasonFluxServed, ContainSubstring("HelmRelease helm.toolkit.fluxcd.io/v2"))))
	}, timeout, poll).Should(Succeed())
}

// upstreamEvents are the events recorded on the linked Upstream.
func upstreamEvents(g Gomega, l *linked) []eventsv1.Event {
	list := &eventsv1.EventList{}
	g.Expect(l.down.Client.List(context.Background(), list, client.InNamespace(l.up.Namespace))).To(Succeed())
	return list.Items
}

// event matches an event of the given type and reason whose note is note
// (a string or a matcher).
func event(typ, reason string, note any) gtypes.GomegaMatcher {
	return And(HaveField("Type", typ), HaveField("Reason", reason), HaveField("Note", note))
}
