package bootstrap_test

import (
	"context"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

func TestBootstrapModuleNeverHandsFluxARefusedKubeconfig(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	refused := testenv.Kubeconfig(t, edge, clientcmdapi.AuthInfo{TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"})
	_, secret := pushRemote(t, ns, "edge", map[string]string{"bootstrap": "yes"}, refused)
	bm := bootstrapFlux(t, ns, nil)

	g.Eventually(func(g Gomega) {
		c := judged(g, bm)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonKubeconfigRefused))
		g.Expect(c.Message).To(ContainSubstring("remote edge: spec.kubeconfigRef: Secret edge-kubeconfig key \"value\": users[0].user.tokenFile: refused"))
		g.Expect(apimeta.FindStatusCondition(bm.Status.Conditions, fleeetv1.ReconcilingCondition)).To(BeNil())
		g.Expect(apimeta.FindStatusCondition(bm.Status.Conditions, fleeetv1.StalledCondition)).To(BeNil())
		g.Expect(bm.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1}))
	}, timeout, poll).Should(Succeed())
	ks := &kustomizev1.KustomizationList{}
	g.Expect(cluster.Client.List(t.Context(), ks, client.InNamespace(ns))).To(Succeed())
	g.Expect(ks.Items).To(BeEmpty(), "Flux is not pointed at a refused kubeconfig")

	// Inline credentials are handed on; fixing the Secret alone brings the
	// BootstrapModule back.
	secret.Data["value"] = inlineToken(t)
	g.Expect(cluster.Client.Update(t.Context(), secret)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.List(t.Context(), ks, client.InNamespace(ns))).To(Succeed())
		g.Expect(ks.Items).To(HaveLen(1))
		g.Expect(ks.Items[0].Spec.KubeConfig.SecretRef.Name).To(Equal("edge-kubeconfig"))
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(bm), bm)).To(Succeed())
		c := apimeta.FindStatusCondition(bm.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonProgressing), "Flux has yet to apply it")
		g.Expect(apimeta.IsStatusConditionTrue(bm.Status.Conditions, fleeetv1.ReconcilingCondition)).To(BeTrue())
		g.Expect(bm.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1}))
	}, timeout, poll).Should(Succeed())
}

// applied returns the Kustomizations the controller wrote in ns, by the
// Remote they apply to, and checks each has its GitRepository.
func applied(g Gomega, ns string) map[string]*kustomizev1.Kustomization {
	ks := &kustomizev1.KustomizationList{}
	g.ExpectWithOffset(1, cluster.Client.List(context.Background(), ks, client.InNamespace(ns))).To(Succeed())
	repos := &sourcev1.GitRepositoryList{}
	g.ExpectWithOffset(1, cluster.Client.List(context.Background(), repos, client.InNamespace(ns))).To(Succeed())
	g.ExpectWithOffset(1, repos.Items).To(HaveLen(len(ks.Items)), "one source per Kustomization")
	byRemote := map[string]*kustomizev1.Kustomization{}
	for i := range ks.Items {
		byRemote[ks.Items[i].Labels[fleeetv1.RemoteLabel]] = &ks.Items[i]
	}
	return byRemote
}

// report writes a Kustomization's status as Flux would after applying
// revision: Ready when ready, failed with msg otherwise.
func report(g Gomega, k *kustomizev1.Kustomization, ready bool, revision, msg string) {
	cond := metav1.Condition{Type: fleeetv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "ReconciliationSucceeded",
		Message: msg, ObservedGeneration: k.Generation, LastTransitionTime: metav1.Now()}
	if !ready {
		cond.Status, cond.Reason = metav1.ConditionFalse, "BuildFailed"
	}
	k.Status.ObservedGeneration, k.Status.LastAppliedRevision = k.Generation, revision
	k.Status.Conditions = []metav1.Condition{cond}
	g.ExpectWithOffset(1, cluster.Client.Status().Update(context.Background(), k)).To(Succeed())
}

// A BootstrapModule runs in every push Remote it selects, through Flux
// objects in the management cluster pointed at each Remote's kubeconfig;
// pull Remotes cannot be reached from there, which its status says. It is Ready once every
// selected Remote that is online runs it, and leaves the Remotes it no
// longer selects, and the cluster when deleted, without a trace.
func TestBootstrapModuleRunsInTheSelectedPushRemotesUntilFluxReportsReady(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	selected := map[string]string{"bootstrap": "yes"}
	online, _ := pushRemote(t, ns, "edge", selected, inlineToken(t))
	pushRemote(t, ns, "unselected", nil, inlineToken(t))
	offline, _ := pushRemote(t, ns, "dead", selected, inlineToken(t))
	offline.Status.Conditions = []metav1.Condition{{Type: fleeetv1.ConnectedCondition, Status: metav1.ConditionFalse,
		Reason: "Unreachable", Message: "cannot reach the cluster", LastTransitionTime: metav1.Now()}}
	g.Expect(cluster.Client.Status().Update(t.Context(), offline)).To(Succeed())
	pulled := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pulled", Labels: selected}}
	g.Expect(cluster.Client.Create(t.Context(), pulled)).To(Succeed())
	bm := bootstrapFlux(t, ns, nil)

	var ks map[string]*kustomizev1.Kustomization
	g.Eventually(func(g Gomega) {
		c := judged(g, bm)
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonProgressing))
		g.Expect(c.Message).To(Equal("0 of 2 push Remotes ready at v2.7.0"))
		g.Expect(bm.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 2, Updated: 2, Offline: 1}))
		g.Expect(bm.Status.Unreachable).To(BeEquivalentTo(1))
		reach := apimeta.FindStatusCondition(bm.Status.Conditions, fleeetv1.RemotesReachableCondition)
		g.Expect(reach).NotTo(BeNil())
		g.Expect(reach.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(reach.Reason).To(Equal(fleeetv1.ReasonPullRemotesSelected))
		g.Expect(reach.Message).To(Equal("not applied to the selected pull Remotes, which the management cluster cannot reach (spec.selector): pulled"))
		ks = applied(g, ns)
		g.Expect(ks).To(HaveLen(2))
		g.Expect(ks).To(HaveKey("edge"))
		g.Expect(ks).To(HaveKey("dead"))
	}, timeout, poll).Should(Succeed())
	g.Expect(bm.Finalizers).To(ContainElement(fleeetv1.BootstrapModuleFinalizer))
	g.Expect(bm.Status.Version).To(Equal("v2.7.0"))
	g.Expect(apimeta.IsStatusConditionTrue(bm.Status.Conditions, fleeetv1.ReconcilingCondition)).To(BeTrue())
	for remote, k := range ks {
		g.Expect(metav1.IsControlledBy(k, bm)).To(BeTrue(), remote)
		g.Expect(k.Labels).To(HaveKeyWithValue(fleeetv1.BootstrapModuleLabel, "flux"), remote)
		g.Expect(k.Spec.KubeConfig.SecretRef.Name).To(Equal(remote+"-kubeconfig"), "Flux applies with the Remote's own kubeconfig")
		g.Expect(k.Spec.KubeConfig.SecretRef.Key).To(Equal("value"), remote)
	}

	// The offline Remote does not hold the others back.
	report(g, ks["edge"], true, "v2.7.0@sha1:0123456789abcdef", "Applied revision: v2.7.0")
	g.Eventually(func(g Gomega) {
		c := judged(g, bm)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonSucceeded))
		g.Expect(c.Message).To(Equal("1 of 2 push Remotes ready at v2.7.0"))
		g.Expect(bm.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 2, Updated: 2, Ready: 1, Offline: 1}))
		g.Expect(apimeta.FindStatusCondition(bm.Status.Conditions, fleeetv1.ReconcilingCondition)).To(BeNil())
	}, timeout, poll).Should(Succeed())

	get := func(g Gomega, k *kustomizev1.Kustomization) {
		g.Expect(cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(k), k)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		get(g, ks["edge"])
		report(g, ks["edge"], false, "v2.7.0@sha1:0123456789abcdef", "kustomize build failed: no such file ./install")
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		c := judged(g, bm)
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonRemoteFailed))
		g.Expect(c.Message).To(Equal("remote edge: kustomize build failed: no such file ./install"))
		g.Expect(bm.Status.Summary.Failed).To(BeEquivalentTo(1))
	}, timeout, poll).Should(Succeed())

	for _, r := range []*fleeetv1.Remote{online, pulled} {
		g.Expect(cluster.Client.Patch(t.Context(), r, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":null}}`)))).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		g.Expect(applied(g, ns)).To(HaveLen(1))
		g.Expect(applied(g, ns)).To(HaveKey("dead"))
		judged(g, bm)
		g.Expect(bm.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1, Offline: 1}))
		g.Expect(bm.Status.Unreachable).To(BeZero())
		g.Expect(apimeta.IsStatusConditionTrue(bm.Status.Conditions, fleeetv1.RemotesReachableCondition)).To(BeTrue(), "no pull Remote selected any more")
	}, timeout, poll).Should(Succeed())

	// No garbage collector runs here: the controller deletes its Flux
	// objects itself before it lets the BootstrapModule go.
	g.Expect(cluster.Client.Delete(t.Context(), bm)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(applied(g, ns)).To(BeEmpty())
		err := cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(bm), bm)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "got %v", err)
	}, timeout, poll).Should(Succeed())
}

// Each problem that keeps a selected push Remote from running the
// BootstrapModule is named on it, and nothing is applied to that Remote.
func TestBootstrapModuleSaysWhatKeepsAPushRemoteFromRunningIt(t *testing.T) {
	for name, tc := range map[string]struct {
		kubeconfig []byte
		edit       func(*fleeetv1.BootstrapModule)
		reason     string
		message    string
		stalled    bool
		summary    fleeetv1.ModuleSummary
	}{
		"a control-plane binding that does not resolve": {
			kubeconfig: []byte("set below"),
			edit: func(bm *fleeetv1.BootstrapModule) {
				bm.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{{Name: "DOMAIN",
					ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "ConfigMap", Name: "missing", FieldPath: "/data/domain"}}}
			},
			reason: fleeetv1.ReasonBindingFailed, message: "remote edge: spec.controlPlaneBindings[DOMAIN]: reading ConfigMap missing: ",
			summary: fleeetv1.ModuleSummary{Total: 1},
		},
		"a kubeconfig Secret that does not exist": {
			reason: fleeetv1.ReasonKubeconfigInvalid, message: "remote edge: spec.kubeconfigRef: Secret edge-kubeconfig not found",
			summary: fleeetv1.ModuleSummary{Total: 1},
		},
		"a selector that is not one": {
			kubeconfig: []byte("set below"),
			edit: func(bm *fleeetv1.BootstrapModule) {
				bm.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "bootstrap", Operator: "Near"}}}
			},
			reason: fleeetv1.ReasonInvalidSelector, message: "spec.selector: ", stalled: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			ns := tenant(t)
			kubeconfig := tc.kubeconfig
			if kubeconfig != nil {
				kubeconfig = inlineToken(t)
			}
			pushRemote(t, ns, "edge", map[string]string{"bootstrap": "yes"}, kubeconfig)
			bm := bootstrapFlux(t, ns, tc.edit)
			g.Eventually(func(g Gomega) {
				c := judged(g, bm)
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Reason).To(Equal(tc.reason))
				g.Expect(c.Message).To(HavePrefix(tc.message))
			}, timeout, poll).Should(Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(bm.Status.Conditions, fleeetv1.StalledCondition)).To(Equal(tc.stalled))
			g.Expect(apimeta.FindStatusCondition(bm.Status.Conditions, fleeetv1.ReconcilingCondition)).To(BeNil())
			g.Expect(bm.Status.Summary).To(Equal(tc.summary))
			g.Expect(applied(g, ns)).To(BeEmpty())
		})
	}
}

// A suspended BootstrapModule applies nothing new until it is resumed.
func TestASuspendedBootstrapModuleAppliesNothingUntilResumed(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	pushRemote(t, ns, "edge", map[string]string{"bootstrap": "yes"}, inlineToken(t))
	bm := bootstrapFlux(t, ns, func(bm *fleeetv1.BootstrapModule) { bm.Spec.Suspend = true })
	g.Eventually(func(g Gomega) []string {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(bm), bm)).To(Succeed())
		return bm.Finalizers
	}, timeout, poll).Should(ContainElement(fleeetv1.BootstrapModuleFinalizer))
	g.Consistently(func(g Gomega) map[string]*kustomizev1.Kustomization { return applied(g, ns) }, time.Second, poll).Should(BeEmpty())

	g.Expect(cluster.Client.Patch(t.Context(), bm, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`)))).To(Succeed())
	g.Eventually(func(g Gomega) map[string]*kustomizev1.Kustomization { return applied(g, ns) }, timeout, poll).Should(HaveKey("edge"))
}
