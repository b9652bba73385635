package assemblage_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	timeout = 2 * time.Minute
	poll    = 200 * time.Millisecond
)

// env is one downstream cluster with the real Flux controllers, a git server,
// a chart repository and private sources, shared by the subtests of
// TestAssemblage.
type env struct {
	c       *testenv.Cluster
	git     string
	charts  string
	private *privateSources
}

// TestAssemblage runs the agent's Assemblage controller in-process against a
// real apiserver and the real Flux controllers, one namespace per subtest.
func TestAssemblage(t *testing.T) {
	c := testenv.StartCluster(t, "downstream")
	testenv.StartFlux(t, c, testenv.SourceController, testenv.KustomizeController, testenv.HelmController)
	web := func(version string) string {
		dir, err := filepath.Abs(filepath.Join("testdata", "charts", "web-"+version))
		if err != nil {
			t.Fatal(err)
		}
		return dir
	}
	e := &env{c: c, git: publishConfigs(t), charts: testenv.NewChartRepo(t,
		testenv.ChartDir("hello"), testenv.ChartDir("widget"), testenv.ChartDir("gadget-crd"),
		web("1.0.0"), web("2.0.0"), web("3.0.0")).URL, private: publishPrivateSources(t)}
	startAgent(t, c, agent.Options{Concurrent: 4})

	t.Run("HelmReleaseWaitsForKustomizationInstallingItsCRD", e.testHelmWaitsForKustomization)
	t.Run("KustomizationWaitsForHelmReleaseInstallingItsCRD", e.testKustomizationWaitsForHelm)
	t.Run("ChainOfFiveAlternatingKindsBecomesReady", e.testChain)
	t.Run("SelectorDependencyWaitsForEveryMatchingSync", e.testSelectorDependency)
	t.Run("RequiredByHoldsEverySyncItSelectsUntilItIsReady", e.testRequiredBy)
	t.Run("FailingDependencyBlocksDependentsUntilFixed", e.testFailingDependency)
	t.Run("DependentUpdateWaitsForDependencyVersionBump", e.testVersionBump)
	t.Run("ADependencyReadyAtAnyVersionLetsTheDependentMoveFirst", e.testReadyAtAny)
	t.Run("AReadyExprDecidesWhenADependencyIsReadyForItsDependent", e.testReadyExpr)
	t.Run("DroppedSyncsAreRemovedInReverseDependencyOrder", e.testRemovalOrder)
	t.Run("DeletingAssemblageTearsDownInReverseDependencyOrder", e.testDeleteOrder)
	t.Run("PlanSplitOverPartsRunsAsOneAndReportsEachPartsSyncs", e.testSplitPlan)
	t.Run("PartLeavingThePlanTakesItsSyncsFluxObjectsAndAMissingPartPrunesNothing", e.testPartLeavingPlan)
	t.Run("CycleAndMissingDependencyAreReported", e.testCycleAndMissing)
	t.Run("BindingsAreSubstitutedAndUnresolvableOnesFailOnlyTheirSync", e.testBindings)
	t.Run("BindingsReadOnlyWhatTheTenantServiceAccountMayRead", e.testBindingsReadAsTenant)
	t.Run("AssemblageWithoutServiceAccountIsStalledAndAppliesNothing", e.testNoServiceAccount)
	t.Run("UnhealthyDeploymentFailsItsSyncAndHoldsDependentsUnlessWaitIsOff", besideTheOthers(e.testUnhealthyWorkload))
	t.Run("FailedHelmUpgradeRollsBackAndANewVersionRecoversWithoutRetry", besideTheOthers(e.testHelmRemediation))
	t.Run("FailedHelmUpgradeUnderRetryOnFailureStaysInPlaceAndIsTriedAgain", besideTheOthers(e.testHelmRetryOnFailure))
	t.Run("PrivateGitOverHTTPSyncsWithCredentialsAndFailsWithoutLeakingThem", e.testPrivateGitOverHTTP)
	t.Run("PrivateGitOverSSHSyncsWithThePinnedHostKeyOnly", e.testPrivateGitOverSSH)
	t.Run("PrivateOCIRegistrySyncsArtifactsAndChartsAtTagOrDigest", e.testPrivateOCIRegistry)
	t.Run("PatchesImagesAndComponentsShapeWhatKustomizeApplies", e.testKustomizeOptions)
	t.Run("SOPSEncryptedSecretIsDecryptedWithTheKeySecretTheSyncNames", e.testSOPSDecryption)
	t.Run("ChangedImmutableObjectFailsItsSyncUntilForceRecreatesIt", e.testForce)
	t.Run("PostRenderersPatchWhatTheChartRendersAndHelmCreatesTheNamespace", e.testPostRenderers)
	t.Run("HealthChecksHoldASyncUntilTheObjectsTheyNameAreReady", e.testHealthChecks)
	t.Run("HealthCheckExprsSayWhenACustomResourceIsReady", e.testHealthCheckExprs)
	t.Run("ASyncFluxReChecksStaysReadyThroughout", e.testRecheck)
	t.Run("AnAssemblageMarkedOrphanGoesAndLeavesWhatItAppliedRunning", e.testOrphan)
}

// besideTheOthers runs a subtest that mostly waits out a Flux timeout (a
// health check, a Helm upgrade's) in parallel with the others like it,
// each in a namespace of its own, once the rest of the suite is done.
func besideTheOthers(test func(*testing.T)) func(*testing.T) {
	return func(t *testing.T) {
		t.Parallel()
		test(t)
	}
}

// publishConfigs serves one git repository with three tags: v1.0.0 good,
// v2.0.0 with a configmap that does not build, v3.0.0 good again. Its web
// path holds a Deployment that never has a pod ready: no node runs here. Its
// helmrelease path holds a HelmRelease of the hello chart from the
// HelmRepository "charts", the way Flux wraps a release in a Kustomization.
func publishConfigs(t testing.TB) string {
	crd, err := os.ReadFile(filepath.Join("testdata", "crds", "widget.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	git := testenv.NewGitServer(t)
	configmap := func(version string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${id}\ndata:\n  version: " + version +
			"\n  value: \"${value:=none}\"\n"
	}
	url, _ := git.Commit(t, "configs", map[string]string{
		"configmap/kustomization.yaml": "resources: [configmap.yaml]\n",
		"configmap/configmap.yaml":     configmap("v1"),
		"crds/kustomization.yaml":      "resources: [widget.yaml]\n",
		"crds/widget.yaml":             string(crd),
		"gadget/kustomization.yaml":    "resources: [gadget.yaml]\n",
		"gadget/gadget.yaml":           "apiVersion: example.fleeet.dev/v1\nkind: Gadget\nmetadata:\n  name: ${id}\nspec: {}\n",
		"widget/kustomization.yaml":    "resources: [widget.yaml]\n",
		"widget/widget.yaml":           "apiVersion: example.fleeet.dev/v1\nkind: Widget\nmetadata:\n  name: ${id}\nspec: {ready: false}\n",
		"web/kustomization.yaml":       "resources: [deployment.yaml]\n",
		"components/labelled/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n" +
			"labels: [{pairs: {component: labelled}}]\n",
		"web/deployment.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n" +
			"  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n" +
			"    spec: {containers: [{name: app, image: registry.invalid/web:1.0.0}]}\n",
		"helmrelease/kustomization.yaml": "resources: [helmrelease.yaml]\n",
		"helmrelease/helmrelease.yaml": "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: ${id}\n" +
			"spec:\n  interval: 10m\n  chart:\n    spec:\n      chart: hello\n      version: 1.2.3\n" +
			"      sourceRef: {kind: HelmRepository, name: charts}\n",
	}, "v1.0.0")
	git.Commit(t, "configs", map[string]string{"configmap/configmap.yaml": "kind: ConfigMap\nmetadata: [\n"}, "v2.0.0")
	git.Commit(t, "configs", map[string]string{"configmap/configmap.yaml": configmap("v3")}, "v3.0.0")
	return url
}

func startAgent(t testing.TB, c *testenv.Cluster, o agent.Options) {
	testenv.RunManager(t, c, "fleet-agent", func(ctx context.Context, mgr ctrl.Manager) error {
		return agent.Setup(ctx, mgr, o)
	})
}

// ks is a kustomize sync of the configs repository.
func (e *env) ks(ns, name, tag, path string, deps ...string) fleeetv1.NamedSync {
	return fleeetv1.NamedSync{Name: name, SyncSpec: fleeetv1.SyncSpec{
		Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: e.git, Tag: tag}},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{
			Path: path, TargetNamespace: ns, Prune: ptr.To(true), Substitute: map[string]string{"id": name},
		}},
		DependsOn: dependsOn(deps),
	}}
}

// hr is a helm sync of a chart of the local chart repository.
func (e *env) hr(name, chart, version string, deps ...string) fleeetv1.NamedSync {
	return fleeetv1.NamedSync{Name: name, SyncSpec: fleeetv1.SyncSpec{
		Source:    fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: e.charts, Chart: chart, Version: version}},
		Package:   fleeetv1.Package{Helm: &fleeetv1.HelmPackage{}},
		DependsOn: dependsOn(deps),
	}}
}

func dependsOn(names []string) []fleeetv1.Dependency {
	var deps []fleeetv1.Dependency
	for _, n := range names {
		deps = append(deps, fleeetv1.Dependency{Name: n})
	}
	return deps
}

// trustedTenant is the ServiceAccount the Assemblages of most tests run
// as: bound to cluster-admin, since their syncs install CRDs.
const trustedTenant = "tenant"

// create creates the Assemblage "plan" in ns, run as trustedTenant.
func (e *env) create(t *testing.T, ns string, syncs ...fleeetv1.NamedSync) *fleeetv1.Assemblage {
	t.Helper()
	e.serviceAccount(t, ns, trustedTenant, nil)
	asm := &fleeetv1.Assemblage{
		ObjectMeta: metav1.ObjectMeta{Name: "plan", Namespace: ns},
		Spec:       fleeetv1.AssemblageSpec{Syncs: syncs, ServiceAccountName: trustedTenant},
	}
	if err := e.c.Client.Create(t.Context(), asm); err != nil {
		t.Fatal(err)
	}
	return asm
}

// serviceAccount creates a ServiceAccount in ns allowed rules in ns only,
// or, for nil rules, cluster-admin everywhere.
func (e *env) serviceAccount(t *testing.T, ns, name string, rules []rbacv1.PolicyRule) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(e.c.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}
	if rules == nil {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   subjects,
		}
		g.Expect(e.c.Client.Create(ctx, crb)).To(Succeed())
		t.Cleanup(func() { _ = e.c.Client.Delete(context.Background(), crb) })
		return
	}
	g.Expect(e.c.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules})).To(Succeed())
	g.Expect(e.c.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   subjects,
	})).To(Succeed())
}

// update replaces the Assemblage's syncs, retrying on conflicts.
func (e *env) update(t *testing.T, asm *fleeetv1.Assemblage, syncs ...fleeetv1.NamedSync) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		if err := e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(asm), asm); err != nil {
			return err
		}
		asm.Spec.Syncs = syncs
		return e.c.Client.Update(t.Context(), asm)
	}, timeout, poll).Should(Succeed())
}

// syncStatus reads the status of one sync.
func (e *env) syncStatus(g Gomega, asm *fleeetv1.Assemblage, name string) fleeetv1.SyncStatus {
	current := &fleeetv1.Assemblage{}
	g.Expect(e.c.Client.Get(context.Background(), client.ObjectKeyFromObject(asm), current)).To(Succeed())
	for _, s := range current.Status.Syncs {
		if s.Name == name {
			return s
		}
	}
	return fleeetv1.SyncStatus{}
}

// waitReady waits until the Assemblage is Ready with every sync Ready, and
// checks its kstatus: observed, Ready=True, not Reconciling or Stalled.
func (e *env) waitReady(t *testing.T, asm *fleeetv1.Assemblage) *fleeetv1.Assemblage {
	t.Helper()
	current := &fleeetv1.Assemblage{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(asm), current)).To(Succeed())
		g.Expect(current.Status.ObservedGeneration).To(Equal(current.Generation))
		g.Expect(apimeta.IsStatusConditionTrue(current.Status.Conditions, fleeetv1.ReadyCondition)).
			To(BeTrue(), "%+v", current.Status)
		g.Expect(current.Status.Summary.Ready).To(Equal(int32(len(current.Spec.Syncs))))
		g.Expect(apimeta.FindStatusCondition(current.Status.Conditions, fleeetv1.ReconcilingCondition)).To(BeNil())
		g.Expect(apimeta.FindStatusCondition(current.Status.Conditions, fleeetv1.StalledCondition)).To(BeNil())
	}, timeout, poll).Should(Succeed())
	return current
}

// appliers lists the Kustomizations and HelmReleases of a namespace by sync.
func (e *env) appliers(g Gomega, ns string) map[string]client.Object {
	out := map[string]client.Object{}
	for _, kind := range []struct{ apiVersion, kind string }{
		{"kustomize.toolkit.fluxcd.io/v1", "KustomizationList"}, {"helm.toolkit.fluxcd.io/v2", "HelmReleaseList"},
	} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(kind.apiVersion)
		list.SetKind(kind.kind)
		g.Expect(e.c.Client.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
		for i := range list.Items {
			out[list.Items[i].GetLabels()[fleeetv1.SyncLabel]] = &list.Items[i]
		}
	}
	return out
}

// getExample reads an object of the example.fleeet.dev/v1 CRDs the test charts and repositories install.
func (e *env) getExample(ns, kind, name string) error {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("example.fleeet.dev/v1")
	obj.SetKind(kind)
	return e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
}

func (e *env) testHelmWaitsForKustomization(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "helm-after-ks", nil)
	asm := e.create(t, ns, e.ks(ns, "crds", "v1.0.0", "./crds"), e.hr("widget", "widget", "0.1.0", "crds"))

	// Until the CRD's Kustomization is Ready, the HelmRelease does not exist.
	g.Eventually(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "widget").State).To(Equal(fleeetv1.SyncBlocked))
		g.Expect(e.syncStatus(g, asm, "widget").BlockedBy).To(Equal([]string{"crds"}))
		g.Expect(e.appliers(g, ns)).To(HaveKey("crds"))
		g.Expect(e.appliers(g, ns)).NotTo(HaveKey("widget"))
	}, timeout, poll).Should(Succeed())

	e.waitReady(t, asm)
	g.Expect(e.getExample(ns, "Widget", "widget")).To(Succeed())
	g.Expect(e.syncStatus(g, asm, "widget").Revision).To(Equal("0.1.0"))
}

func (e *env) testKustomizationWaitsForHelm(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "ks-after-helm", nil)
	asm := e.create(t, ns, e.hr("gadget-crd", "gadget-crd", "0.1.0"), e.ks(ns, "gadget", "v1.0.0", "./gadget", "gadget-crd"))
	g.Eventually(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "gadget").State).To(Equal(fleeetv1.SyncBlocked))
		g.Expect(e.appliers(g, ns)).NotTo(HaveKey("gadget"))
	}, timeout, poll).Should(Succeed())

	e.waitReady(t, asm)
	g.Expect(e.getExample(ns, "Gadget", "gadget")).To(Succeed())
}

func (e *env) testChain(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "chain", nil)
	asm := e.create(t, ns,
		e.ks(ns, "s1", "v1.0.0", "./configmap"),
		e.hr("s2", "hello", "1.2.3", "s1"),
		e.ks(ns, "s3", "v1.0.0", "./configmap", "s2"),
		e.hr("s4", "hello", "1.2.3", "s3"),
		e.ks(ns, "s5", "v1.0.0", "./configmap", "s4"),
	)
	// Each sync's applier appears only after its dependency is Ready: the
	// creation timestamps of the five appliers are ordered along the chain.
	done := e.waitReady(t, asm)
	objs := e.appliers(g, ns)
	for i, name := range []string{"s1", "s2", "s3", "s4"} {
		next := []string{"s2", "s3", "s4", "s5"}[i]
		g.Expect(objs[next].GetCreationTimestamp().Time).NotTo(BeTemporally("<", objs[name].GetCreationTimestamp().Time),
			"%s created before its dependency %s", next, name)
	}
	for _, s := range done.Status.Syncs {
		g.Expect(s.State).To(Equal(fleeetv1.SyncReady))
		g.Expect(s.Revision).NotTo(BeEmpty())
	}
	var cm corev1.ConfigMap
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "s5"}, &cm)).To(Succeed())
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "s4-hello"}, &cm)).To(Succeed())

	// The agent's metrics say the same: five syncs Ready, each applied once.
	g.Expect(agentMetric(g, "fleeet_agent_syncs", map[string]string{"namespace": ns, "assemblage": asm.Name, "state": "Ready"})).To(Equal(5.0))
	g.Expect(agentMetric(g, "fleeet_agent_syncs", map[string]string{"namespace": ns, "assemblage": asm.Name, "state": "Blocked"})).To(Equal(0.0))
	g.Expect(agentMetric(g, "fleeet_agent_apply_duration_seconds", nil)).To(BeNumerically(">=", 5), "observations")
}

// agentMetric reads one sample of the agent's metrics from the process's
// registry (the agent runs in-process): a gauge's value, or a histogram's
// count.
func agentMetric(g Gomega, name string, labels map[string]string) float64 {
	families, err := ctrlmetrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metrics
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetGauge().GetValue()
		}
	}
	g.Expect(name).To(BeEmpty(), "no sample of %s with %v", name, labels)
	return 0
}

func (e *env) testSelectorDependency(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "selector", nil)
	platform1 := e.ks(ns, "platform-a", "v1.0.0", "./configmap")
	platform1.Labels = map[string]string{"tier": "platform"}
	// platform-b waits for a broken dependency, so it cannot become Ready yet.
	broken := e.ks(ns, "broken", "v1.0.0", "./missing")
	platform2 := e.hr("platform-b", "hello", "1.2.3", "broken")
	platform2.Labels = map[string]string{"tier": "platform"}
	app := e.ks(ns, "app", "v1.0.0", "./configmap")
	app.DependsOn = []fleeetv1.Dependency{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "platform"}}}}
	asm := e.create(t, ns, platform1, broken, platform2, app)

	g.Eventually(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "platform-a").State).To(Equal(fleeetv1.SyncReady))
		st := e.syncStatus(g, asm, "app")
		g.Expect(st.State).To(Equal(fleeetv1.SyncBlocked))
		g.Expect(st.BlockedBy).To(Equal([]string{"platform-b"}))
	}, timeout, poll).Should(Succeed())
	g.Expect(e.appliers(g, ns)).NotTo(HaveKey("app"))

	broken.Package.Kustomize.Path = "./configmap"
	e.update(t, asm, platform1, broken, platform2, app)
	e.waitReady(t, asm)
}

// A prerequisite declared from its own side (requiredBy {}, as a CNI
// would be) holds every other sync of both kinds until it is Ready.
func (e *env) testRequiredBy(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "required", nil)
	cni := e.ks(ns, "cni", "v1.0.0", "./missing")
	cni.RequiredBy = &metav1.LabelSelector{}
	app, chart := e.ks(ns, "app", "v1.0.0", "./configmap"), e.hr("chart", "hello", "1.2.3")
	asm := e.create(t, ns, cni, app, chart)

	g.Eventually(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "cni").State).To(Equal(fleeetv1.SyncFailed))
		for _, name := range []string{"app", "chart"} {
			st := e.syncStatus(g, asm, name)
			g.Expect(st.State).To(Equal(fleeetv1.SyncBlocked), name)
			g.Expect(st.BlockedBy).To(Equal([]string{"cni"}), name)
		}
	}, timeout, poll).Should(Succeed())
	g.Expect(e.appliers(g, ns)).To(HaveLen(1), "only the prerequisite is applied")

	cni.Package.Kustomize.Path = "./configmap"
	e.update(t, asm, cni, app, chart)
	e.waitReady(t, asm)
}

func (e *env) testFailingDependency(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "failing", nil)
	base := e.ks(ns, "base", "v1.0.0", "./does-not-exist")
	asm := e.create(t, ns, base, e.hr("app", "hello", "1.2.3", "base"), e.ks(ns, "top", "v1.0.0", "./configmap", "app"))

	g.Eventually(func(g Gomega) {
		st := e.syncStatus(g, asm, "base")
		g.Expect(st.State).To(Equal(fleeetv1.SyncFailed), "%+v %+v", st, e.appliers(g, ns)["base"])
		g.Expect(st.Message).To(ContainSubstring("does-not-exist"))
		app := e.syncStatus(g, asm, "app")
		g.Expect(app.State).To(Equal(fleeetv1.SyncBlocked))
		g.Expect(app.Message).To(ContainSubstring("base is Failed"))
		g.Expect(app.Message).To(ContainSubstring("does-not-exist"))
		g.Expect(e.syncStatus(g, asm, "top").State).To(Equal(fleeetv1.SyncBlocked))
	}, timeout, poll).Should(Succeed())
	g.Expect(e.appliers(g, ns)).To(HaveLen(1))

	current := &fleeetv1.Assemblage{}
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(asm), current)).To(Succeed())
	ready := apimeta.FindStatusCondition(current.Status.Conditions, fleeetv1.ReadyCondition)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(fleeetv1.ReasonSyncFailed))

	base.Package.Kustomize.Path = "./configmap"
	e.update(t, asm, base, e.hr("app", "hello", "1.2.3", "base"), e.ks(ns, "top", "v1.0.0", "./configmap", "app"))
	e.waitReady(t, asm)
}

func (e *env) testVersionBump(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "bump", nil)
	asm := e.create(t, ns, e.ks(ns, "dep", "v1.0.0", "./configmap"), e.ks(ns, "app", "v1.0.0", "./configmap", "dep"))
	e.waitReady(t, asm)
	oldApp := e.appliers(g, ns)["app"].GetAnnotations()[fleeetv1.SpecHashAnnotation]

	// Both move on; the dependency's new version does not build.
	e.update(t, asm, e.ks(ns, "dep", "v2.0.0", "./configmap"), e.ks(ns, "app", "v3.0.0", "./configmap", "dep"))
	g.Eventually(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "dep").State).To(Equal(fleeetv1.SyncFailed))
		g.Expect(e.syncStatus(g, asm, "app").State).To(Equal(fleeetv1.SyncBlocked))
	}, timeout, poll).Should(Succeed())
	// The dependent still runs its old version, untouched.
	app := e.appliers(g, ns)["app"]
	g.Expect(app.GetAnnotations()[fleeetv1.SpecHashAnnotation]).To(Equal(oldApp))
	var cm corev1.ConfigMap
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("version", "v1"))

	e.update(t, asm, e.ks(ns, "dep", "v3.0.0", "./configmap"), e.ks(ns, "app", "v3.0.0", "./configmap", "dep"))
	done := e.waitReady(t, asm)
	for _, s := range done.Status.Syncs {
		g.Expect(s.Revision).To(HavePrefix("v3.0.0@sha1:"))
	}
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("version", "v3"))
}

// A dependency held back on its old version (its own dependency's new
// version does not build) is Ready at any version, not at its desired
// one: a dependent waiting for it at any version moves on, one waiting
// for the desired version does not.
func (e *env) testReadyAtAny(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "any", nil)
	anyVersion := func(s fleeetv1.NamedSync) fleeetv1.NamedSync {
		s.DependsOn[0].ReadyAt = fleeetv1.ReadyAtAny
		return s
	}
	syncs := func(base, rest string) []fleeetv1.NamedSync {
		return []fleeetv1.NamedSync{e.ks(ns, "base", "v1.0.0", base), e.ks(ns, "dep", rest, "./configmap", "base"),
			anyVersion(e.ks(ns, "loose", rest, "./configmap", "dep")), e.ks(ns, "strict", rest, "./configmap", "dep")}
	}
	asm := e.create(t, ns, syncs("./configmap", "v1.0.0")...)
	e.waitReady(t, asm)
	strict := e.appliers(g, ns)["strict"].GetAnnotations()[fleeetv1.SpecHashAnnotation]

	e.update(t, asm, syncs("./missing", "v3.0.0")...)
	g.Eventually(func(g Gomega) {
		dep := e.syncStatus(g, asm, "dep")
		g.Expect(dep.State).To(Equal(fleeetv1.SyncBlocked))
		loose := e.syncStatus(g, asm, "loose")
		g.Expect(loose.State).To(Equal(fleeetv1.SyncReady), loose.Message)
		g.Expect(loose.Revision).To(HavePrefix("v3.0.0@sha1:"))
		st := e.syncStatus(g, asm, "strict")
		g.Expect(st.State).To(Equal(fleeetv1.SyncBlocked))
		g.Expect(st.Message).To(ContainSubstring("dep is not updated to its desired version yet"))
	}, timeout, poll).Should(Succeed())
	g.Expect(e.appliers(g, ns)["strict"].GetAnnotations()[fleeetv1.SpecHashAnnotation]).To(Equal(strict))
}

// A dependency Ready at v1.0.0 is ready for a dependent without a
// readyExpr, and not for one whose readyExpr asks for v3 applied, which
// waits, saying so, until the dependency applies v3.0.0; an expression
// reading a field the dependency's status does not have holds its
// dependent and says which.
func (e *env) testReadyExpr(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "expr", nil)
	const v3 = `dep.status.lastAppliedRevision.startsWith("v3.")`
	withExpr := func(s fleeetv1.NamedSync, expr string) fleeetv1.NamedSync {
		s.DependsOn[0].ReadyExpr = expr
		return s
	}
	syncs := func(tag string) []fleeetv1.NamedSync {
		return []fleeetv1.NamedSync{e.ks(ns, "dep", tag, "./configmap"), e.ks(ns, "plain", "v1.0.0", "./configmap", "dep"),
			withExpr(e.ks(ns, "gated", "v1.0.0", "./configmap", "dep"), v3),
			withExpr(e.ks(ns, "unknowing", "v1.0.0", "./configmap", "dep"), `dep.status.rolloutStage == "done"`)}
	}
	asm := e.create(t, ns, syncs("v1.0.0")...)
	g.Eventually(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "plain").State).To(Equal(fleeetv1.SyncReady))
		gated := e.syncStatus(g, asm, "gated")
		g.Expect(gated.State).To(Equal(fleeetv1.SyncBlocked))
		g.Expect(gated.Message).To(Equal(fmt.Sprintf("waiting for dependencies: dep is not ready by its readyExpr %q", v3)))
		unknowing := e.syncStatus(g, asm, "unknowing")
		g.Expect(unknowing.State).To(Equal(fleeetv1.SyncBlocked))
		g.Expect(unknowing.Message).To(HaveSuffix("no such key: rolloutStage"))
	}, timeout, poll).Should(Succeed())
	g.Expect(e.appliers(g, ns)).NotTo(HaveKey("gated"), "a blocked sync is not applied")

	e.update(t, asm, syncs("v3.0.0")...)
	g.Eventually(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "dep").Revision).To(HavePrefix("v3.0.0@sha1:"))
		gated := e.syncStatus(g, asm, "gated")
		g.Expect(gated.State).To(Equal(fleeetv1.SyncReady), gated.Message)
		g.Expect(e.syncStatus(g, asm, "unknowing").State).To(Equal(fleeetv1.SyncBlocked))
	}, timeout, poll).Should(Succeed())
}

// watchDeletions records the order in which Kustomizations and HelmReleases
// of a namespace are deleted, as the apiserver reports it.
func (e *env) watchDeletions(t *testing.T, ns string) func() []string {
	wc, err := client.NewWithWatch(e.c.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	events := make(chan string, 100)
	for _, list := range []client.ObjectList{&kustomizev1.KustomizationList{}, &unstructured.UnstructuredList{}} {
		if u, ok := list.(*unstructured.UnstructuredList); ok {
			u.SetAPIVersion("helm.toolkit.fluxcd.io/v2")
			u.SetKind("HelmReleaseList")
		}
		w, err := wc.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				if ev.Type == watch.Deleted {
					events <- ev.Object.(client.Object).GetLabels()[fleeetv1.SyncLabel]
				}
			}
		}()
	}
	var order []string
	return func() []string {
		for {
			select {
			case name := <-events:
				order = append(order, name)
			default:
				return order
			}
		}
	}
}

func (e *env) testRemovalOrder(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "removal", nil)
	keep := e.ks(ns, "keep", "v1.0.0", "./configmap")
	asm := e.create(t, ns, keep, e.ks(ns, "a", "v1.0.0", "./configmap"),
		e.hr("b", "hello", "1.2.3", "a"), e.ks(ns, "c", "v1.0.0", "./configmap", "b"))
	e.waitReady(t, asm)

	deleted := e.watchDeletions(t, ns)
	e.update(t, asm, keep)
	g.Eventually(deleted, timeout, poll).Should(HaveLen(3))
	g.Expect(deleted()).To(Equal([]string{"c", "b", "a"}))
	e.waitReady(t, asm)
	g.Expect(e.appliers(g, ns)).To(HaveLen(1))
	var cm corev1.ConfigMap
	err := e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "a"}, &cm)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Flux pruned what sync a applied: %v", err)
}

func (e *env) testDeleteOrder(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "teardown", nil)
	asm := e.create(t, ns, e.ks(ns, "a", "v1.0.0", "./configmap"),
		e.hr("b", "hello", "1.2.3", "a"), e.ks(ns, "c", "v1.0.0", "./configmap", "b"))
	e.waitReady(t, asm)

	deleted := e.watchDeletions(t, ns)
	g.Expect(e.c.Client.Delete(t.Context(), asm)).To(Succeed())
	g.Eventually(func() bool {
		err := e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(asm), &fleeetv1.Assemblage{})
		return apierrors.IsNotFound(err)
	}, timeout, poll).Should(BeTrue())
	g.Expect(deleted()).To(Equal([]string{"c", "b", "a"}))
	g.Expect(e.appliers(g, ns)).To(BeEmpty())
}

func (e *env) testCycleAndMissing(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "cycle", nil)
	asm := e.create(t, ns,
		e.ks(ns, "a", "v1.0.0", "./configmap", "b"),
		e.ks(ns, "b", "v1.0.0", "./configmap", "a"),
		e.ks(ns, "orphan", "v1.0.0", "./configmap", "ghost"),
		e.ks(ns, "fine", "v1.0.0", "./configmap"),
	)
	g.Eventually(func(g Gomega) {
		current := &fleeetv1.Assemblage{}
		g.Expect(e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(asm), current)).To(Succeed())
		stalled := apimeta.FindStatusCondition(current.Status.Conditions, fleeetv1.StalledCondition)
		g.Expect(stalled).NotTo(BeNil())
		g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(stalled.Message).To(Equal("dependency cycle: a → b → a"))
		g.Expect(e.syncStatus(g, asm, "a").Message).To(Equal("dependency cycle: a → b → a"))
		g.Expect(e.syncStatus(g, asm, "b").Message).To(Equal("dependency cycle: b → a → b"))
		orphan := e.syncStatus(g, asm, "orphan")
		g.Expect(orphan.State).To(Equal(fleeetv1.SyncBlocked))
		g.Expect(orphan.Message).To(ContainSubstring("ghost is not in this assemblage"))
		g.Expect(e.syncStatus(g, asm, "fine").State).To(Equal(fleeetv1.SyncReady))
	}, timeout, poll).Should(Succeed())
	g.Expect(e.appliers(g, ns)).To(HaveLen(1), "only the sync without dependency problems is applied")
}

func (e *env) testBindings(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "bindings", nil)
	g.Expect(e.c.Client.Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: ns},
		Data:       map[string]string{"region": "eu-west-1"},
	})).To(Succeed())

	ks := e.ks(ns, "configured", "v1.0.0", "./configmap")
	ks.Bindings = []fleeetv1.Binding{
		{Name: "REGION", ObjectFieldRef: &fleeetv1.ObjectFieldRef{APIVersion: "v1", Kind: "ConfigMap", Name: "cluster-info", FieldPath: "/data/region"}},
		{Name: "ZONE", Value: ptr.To("$(REGION)a")},
	}
	ks.Package.Kustomize.Substitute["value"] = "zone=$(ZONE) literal=$$(ZONE)"
	hr := e.hr("greeter", "hello", "1.2.3")
	hr.Bindings = ks.Bindings
	values, _ := json.Marshal(map[string]any{"greeting": "hello from $(ZONE)"})
	hr.Package.Helm.Values = &apiextensionsv1.JSON{Raw: values}
	// valuesFrom reaches the chart, below values and any binding in them.
	fromValues := e.hr("from-values", "hello", "1.2.3")
	fromValues.Package.Helm.ValuesFrom = []fleeetv1.ValuesReference{{Kind: "ConfigMap", Name: "cluster-info", ValuesKey: "region", TargetPath: "greeting"}}
	bad := e.ks(ns, "unbound", "v1.0.0", "./configmap")
	bad.Bindings = []fleeetv1.Binding{{Name: "MISSING", ObjectFieldRef: &fleeetv1.ObjectFieldRef{
		APIVersion: "v1", Kind: "ConfigMap", Name: "cluster-info", FieldPath: "/data/nope"}}}
	asm := e.create(t, ns, ks, hr, fromValues, bad)

	g.Eventually(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "configured").State).To(Equal(fleeetv1.SyncReady))
		g.Expect(e.syncStatus(g, asm, "greeter").State).To(Equal(fleeetv1.SyncReady))
		g.Expect(e.syncStatus(g, asm, "from-values").State).To(Equal(fleeetv1.SyncReady))
		st := e.syncStatus(g, asm, "unbound")
		g.Expect(st.State).To(Equal(fleeetv1.SyncFailed))
		g.Expect(st.Message).To(Equal("binding MISSING: ConfigMap " + ns + "/cluster-info: field /data/nope not found"))
	}, timeout, poll).Should(Succeed())

	var cm corev1.ConfigMap
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "configured"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("value", "zone=eu-west-1a literal=$(ZONE)"))
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "greeter-hello"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("greeting", "hello from eu-west-1a"))
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "from-values-hello"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("greeting", "eu-west-1"), "valuesFrom reached the chart")
}

// testKustomizeOptions applies the web path with a patch (taking a
// binding through post-build substitution), an image rewrite and a
// component, and reads the Deployment the real kustomize-controller
// applied. No node runs here, so the sync does not wait for its pods.
func (e *env) testKustomizeOptions(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "options", nil)
	ks := e.ks(ns, "web", "v1.0.0", "./web")
	ks.Bindings = []fleeetv1.Binding{{Name: "REPLICAS", Value: ptr.To("3")}}
	k := ks.Package.Kustomize
	k.Wait = ptr.To(false)
	k.Substitute["replicas"] = "$(REPLICAS)"
	k.Patches = []fleeetv1.KustomizePatch{{
		Patch:  "- op: add\n  path: /spec/replicas\n  value: ${replicas}\n",
		Target: &fleeetv1.PatchTarget{Group: "apps", Version: "v1", Kind: "Deployment", Name: "web"},
	}, {
		Patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n" +
			"spec:\n  template:\n    spec:\n      containers:\n      - name: app\n        args: [--name=$(POD_NAME)]\n",
	}}
	k.Images = []fleeetv1.KustomizeImage{{Name: "registry.invalid/web", NewTag: "2.0.0"}}
	k.Components = []string{"../components/labelled"}
	asm := e.create(t, ns, ks)
	g.Eventually(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "web").State).To(Equal(fleeetv1.SyncReady))
	}, timeout, poll).Should(Succeed())
	d := &appsv1.Deployment{}
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, d)).To(Succeed())
	g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(3)), "the patch, with the binding substituted after it")
	g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.invalid/web:2.0.0"))
	g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(Equal([]string{"--name=$(POD_NAME)"}), "Kubernetes' own $(…) is left alone")
	g.Expect(d.Labels).To(HaveKeyWithValue("component", "labelled"))
}

// testBindingsReadAsTenant is the cross-tenant read: tenant B's downstream
// namespace holds a Secret the agent may read (there, the credential of
// tenant A's Upstream) but B's ServiceAccount may not. B's binding to it
// fails and nothing of it reaches a Flux object, while B's binding to what
// B may read resolves.
func (e *env) testBindingsReadAsTenant(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "shared", nil)
	const token = "management-token-of-team-a"
	g.Expect(e.c.Client.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a-credential", Namespace: ns},
		StringData: map[string]string{"token": token},
	})).To(Succeed())
	g.Expect(e.c.Client.Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: ns},
		Data:       map[string]string{"region": "eu-west-1", "value": "from-configmap"},
	})).To(Succeed())
	e.serviceAccount(t, ns, "team-b", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}})

	allowed := e.ks(ns, "allowed", "v1.0.0", "./configmap")
	allowed.Bindings = []fleeetv1.Binding{{Name: "REGION", ObjectFieldRef: &fleeetv1.ObjectFieldRef{
		APIVersion: "v1", Kind: "ConfigMap", Name: "cluster-info", FieldPath: "/data/region"}}}
	allowed.Package.Kustomize.Substitute["value"] = "$(REGION)"
	leaky := e.hr("leaky", "hello", "1.2.3")
	leaky.Bindings = []fleeetv1.Binding{{Name: "TOKEN", ObjectFieldRef: &fleeetv1.ObjectFieldRef{
		APIVersion: "v1", Kind: "Secret", Name: "team-a-credential", FieldPath: "/data/token"}}}
	values, _ := json.Marshal(map[string]any{"greeting": "$(TOKEN)"})
	leaky.Package.Helm.Values = &apiextensionsv1.JSON{Raw: values}
	// Flux reads valuesFrom and substituteFrom with its own rights: what B
	// may read flows in (B may not keep Helm's release Secrets, so only a
	// kustomize sync shows it), the Secret B may not read is refused by the
	// agent.
	fromVars := e.ks(ns, "from-vars", "v1.0.0", "./configmap")
	fromVars.Package.Kustomize.SubstituteFrom = []fleeetv1.SubstituteReference{{Kind: "ConfigMap", Name: "cluster-info"}}
	valuesLeak := e.hr("values-leak", "hello", "1.2.3")
	valuesLeak.Package.Helm.ValuesFrom = []fleeetv1.ValuesReference{{Kind: "Secret", Name: "team-a-credential", ValuesKey: "token", TargetPath: "greeting"}}
	varsLeak := e.ks(ns, "vars-leak", "v1.0.0", "./configmap")
	varsLeak.Package.Kustomize.SubstituteFrom = []fleeetv1.SubstituteReference{{Kind: "Secret", Name: "team-a-credential", Optional: true}}
	// Source-controller reads a source's credentials and CA with its own
	// rights too, and sends them to the URL the tenant chose.
	gitLeak := e.ks(ns, "git-leak", "v1.0.0", "./configmap")
	gitLeak.Source.SecretRef = &fleeetv1.LocalObjectReference{Name: "team-a-credential"}
	certLeak := e.hr("cert-leak", "hello", "1.2.3")
	certLeak.Source.CertSecretRef = &fleeetv1.LocalObjectReference{Name: "team-a-credential"}
	leaks := map[string]string{
		"values-leak": "HelmRelease spec.valuesFrom[0]",
		"vars-leak":   "Kustomization spec.postBuild.substituteFrom[0]",
		"git-leak":    "GitRepository spec.secretRef",
		"cert-leak":   "HelmRepository spec.certSecretRef",
	}
	asm := &fleeetv1.Assemblage{
		ObjectMeta: metav1.ObjectMeta{Name: "team-b", Namespace: ns},
		Spec: fleeetv1.AssemblageSpec{Syncs: []fleeetv1.NamedSync{allowed, leaky, fromVars, valuesLeak, varsLeak, gitLeak, certLeak},
			ServiceAccountName: "team-b"},
	}
	g.Expect(e.c.Client.Create(t.Context(), asm)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "allowed").State).To(Equal(fleeetv1.SyncReady))
		g.Expect(e.syncStatus(g, asm, "from-vars").State).To(Equal(fleeetv1.SyncReady))
		for name, field := range leaks {
			st := e.syncStatus(g, asm, name)
			g.Expect(st.State).To(Equal(fleeetv1.SyncFailed), name)
			g.Expect(st.Message).To(Equal(field+": the tenant's ServiceAccount may not read Secret "+ns+"/team-a-credential"), name)
		}
	}, timeout, poll).Should(Succeed())
	var cm corev1.ConfigMap
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "allowed"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("value", "eu-west-1"))
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "from-vars"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("value", "from-configmap"), "substituteFrom reached the manifests")
	for name := range leaks {
		g.Expect(e.appliers(g, ns)).NotTo(HaveKey(name))
	}

	// Nothing of the Secret reached a Flux object, encoded or not.
	encoded := base64.StdEncoding.EncodeToString([]byte(token))
	for _, kind := range []string{"HelmReleaseList", "HelmRepositoryList", "KustomizationList", "GitRepositoryList"} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(map[string]string{
			"HelmReleaseList": "helm.toolkit.fluxcd.io/v2", "KustomizationList": "kustomize.toolkit.fluxcd.io/v1",
			"HelmRepositoryList": "source.toolkit.fluxcd.io/v1", "GitRepositoryList": "source.toolkit.fluxcd.io/v1",
		}[kind])
		list.SetKind(kind)
		g.Expect(e.c.Client.List(t.Context(), list, client.InNamespace(ns))).To(Succeed())
		for _, obj := range list.Items {
			raw, err := json.Marshal(obj.Object)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(raw)).NotTo(Or(ContainSubstring(token), ContainSubstring(encoded)),
				"%s %s holds tenant A's credential", obj.GetKind(), obj.GetName())
		}
	}
	g.Expect(e.appliers(g, ns)).NotTo(HaveKey("leaky"))

	g.Eventually(func(g Gomega) {
		st := e.syncStatus(g, asm, "leaky")
		g.Expect(st.State).To(Equal(fleeetv1.SyncFailed))
		g.Expect(st.Message).To(HavePrefix("binding TOKEN: reading Secret " + ns + "/team-a-credential: "))
		g.Expect(st.Message).To(ContainSubstring("forbidden"))
		g.Expect(st.Message).NotTo(ContainSubstring(token))
		current := &fleeetv1.Assemblage{}
		g.Expect(e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(asm), current)).To(Succeed())
		g.Expect(current.Status.ObservedGeneration).To(Equal(current.Generation))
		ready := apimeta.FindStatusCondition(current.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(fleeetv1.ReasonSyncFailed))
		g.Expect(ready.Message).To(ContainSubstring("leaky: binding TOKEN"))
	}, timeout, poll).Should(Succeed())
}

// testNoServiceAccount: an Assemblage naming no ServiceAccount would have
// Flux apply as itself; it is refused until it names one.
func (e *env) testNoServiceAccount(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "unconfined", nil)
	asm := &fleeetv1.Assemblage{
		ObjectMeta: metav1.ObjectMeta{Name: "plan", Namespace: ns},
		Spec:       fleeetv1.AssemblageSpec{Syncs: []fleeetv1.NamedSync{e.ks(ns, "app", "v1.0.0", "./configmap")}},
	}
	g.Expect(e.c.Client.Create(t.Context(), asm)).To(Succeed())

	current := &fleeetv1.Assemblage{}
	g.Eventually(func(g Gomega) {
		g.Expect(e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(asm), current)).To(Succeed())
		g.Expect(current.Status.ObservedGeneration).To(Equal(current.Generation))
	}, timeout, poll).Should(Succeed())
	g.Expect(e.appliers(g, ns)).To(BeEmpty(), "nothing is applied without a ServiceAccount")
	stalled := apimeta.FindStatusCondition(current.Status.Conditions, fleeetv1.StalledCondition)
	g.Expect(stalled).NotTo(BeNil(), "%+v", current.Status)
	g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(stalled.Reason).To(Equal(fleeetv1.ReasonServiceAccountNameUnset))
	g.Expect(stalled.Message).To(HavePrefix("spec.serviceAccountName: "))
	ready := apimeta.FindStatusCondition(current.Status.Conditions, fleeetv1.ReadyCondition)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(fleeetv1.ReasonServiceAccountNameUnset))
	g.Expect(e.syncStatus(g, asm, "app").State).To(Equal(fleeetv1.SyncFailed))

	// Naming one lets the plan run.
	e.serviceAccount(t, ns, trustedTenant, nil)
	g.Eventually(func() error {
		if err := e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(asm), asm); err != nil {
			return err
		}
		asm.Spec.ServiceAccountName = trustedTenant
		return e.c.Client.Update(t.Context(), asm)
	}, timeout, poll).Should(Succeed())
	e.waitReady(t, asm)
}

// testUnhealthyWorkload: a kustomize sync waits for what it applied to run.
// Its Deployment never has a pod ready (no node runs here), so once the
// timeout passes the sync is Failed with Flux's health-check message, its
// health says why (a crash-looping pod written as the kubelet would) and
// its dependent is never applied. Opting out of wait makes it Ready once
// applied, with its health still telling the truth, and releases the
// dependent.
func (e *env) testUnhealthyWorkload(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "unhealthy", nil)
	crashing := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-5d9f6-x4k2p", Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/web:1.0.0"}}},
	}
	g.Expect(e.c.Client.Create(t.Context(), crashing)).To(Succeed())
	crashing.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "registry.invalid/web:1.0.0", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s restarting failed container"}}}},
	}
	g.Expect(e.c.Client.Status().Update(t.Context(), crashing)).To(Succeed())

	web := e.ks(ns, "web", "v1.0.0", "./web")
	web.Package.Kustomize.Timeout = &metav1.Duration{Duration: 30 * time.Second} // Flux's least
	app := e.ks(ns, "app", "v1.0.0", "./configmap", "web")
	asm := e.create(t, ns, web, app)

	wantHealth := &fleeetv1.WorkloadHealth{Workloads: 1, ReadyPods: 0, DesiredPods: 1, Reason: "CrashLoopBackOff",
		Message: "Deployment web: pod web-5d9f6-x4k2p: container app"}
	g.Eventually(func(g Gomega) {
		st := e.syncStatus(g, asm, "web")
		g.Expect(st.State).To(Equal(fleeetv1.SyncFailed), "%+v", st)
		g.Expect(st.Message).To(ContainSubstring("timeout waiting for: [Deployment/" + ns + "/web status: 'InProgress'"))
		g.Expect(st.Health).To(Equal(wantHealth))
		dep := e.syncStatus(g, asm, "app")
		g.Expect(dep.State).To(Equal(fleeetv1.SyncBlocked))
		g.Expect(dep.Message).To(ContainSubstring("web is Failed: "))
	}, timeout, poll).Should(Succeed())
	g.Expect(e.appliers(g, ns)).NotTo(HaveKey("app"), "the dependent waits for pods that run")
	g.Expect(e.syncStatus(g, asm, "web").Message).NotTo(ContainSubstring("back-off"), "no pod message is copied")
	current := &fleeetv1.Assemblage{}
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(asm), current)).To(Succeed())
	g.Expect(current.Status.ObservedGeneration).To(Equal(current.Generation))
	ready := apimeta.FindStatusCondition(current.Status.Conditions, fleeetv1.ReadyCondition)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(fleeetv1.ReasonSyncFailed))

	web.Package.Kustomize.Wait = ptr.To(false)
	e.update(t, asm, web, app)
	done := e.waitReady(t, asm)
	for _, st := range done.Status.Syncs {
		if st.Name == "web" {
			g.Expect(st.Health).To(Equal(wantHealth), "Ready at apply, and still not running")
		}
	}
	var cm corev1.ConfigMap
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app"}, &cm)).To(Succeed())
}

// testHelmRemediation: a HelmRelease whose upgrade cannot become ready is
// rolled back, tried again and rolled back again (the sync's override of
// one retry, within its five-second timeout), leaving the release running
// its last good version and the sync Failed; the next version is installed
// without anyone running fleetctl retry.
func (e *env) testHelmRemediation(t *testing.T) {
	g := NewWithT(t)
	ns, asm, web := e.failHelmUpgrade(t, "remediation", &fleeetv1.HelmRemediation{UpgradeRetries: ptr.To(int32(1))})
	g.Eventually(func(g Gomega) {
		st := e.syncStatus(g, asm, "web")
		g.Expect(st.State).To(Equal(fleeetv1.SyncFailed), "%+v", st)
		g.Expect(st.Message).To(HavePrefix("Failed to upgrade after 2 attempt(s): "))
		g.Expect(st.Message).To(ContainSubstring("rollback"))
		g.Expect(st.Revision).To(Equal("1.0.0"), "rolled back to the last good version")
		g.Expect(st.Health).To(BeNil(), "1.0.0 runs no workload")
	}, timeout, poll).Should(Succeed())
	var cm corev1.ConfigMap
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web-web"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("chartVersion", "1.0.0"))
	err := e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web-web"}, &appsv1.Deployment{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the rollback removed 2.0.0's Deployment: %v", err)

	web.Source.Helm.Version = "3.0.0"
	e.update(t, asm, web)
	done := e.waitReady(t, asm)
	g.Expect(done.Spec.RetryRequestedAt).To(BeEmpty())
	g.Expect(done.Status.Syncs[0].Revision).To(Equal("3.0.0"))
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web-web"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("chartVersion", "3.0.0"))
}

// failHelmUpgrade installs chart web 1.0.0 in a fresh namespace, waits for
// it, then asks for 2.0.0, whose Deployment is never ready (the test
// cluster runs no pods) within a 5s timeout, with remediation r.
func (e *env) failHelmUpgrade(t *testing.T, prefix string, r *fleeetv1.HelmRemediation) (string, *fleeetv1.Assemblage, fleeetv1.NamedSync) {
	t.Helper()
	ns := e.c.Namespace(t, prefix, nil)
	web := e.hr("web", "web", "1.0.0")
	asm := e.create(t, ns, web)
	e.waitReady(t, asm)
	web.Source.Helm.Version = "2.0.0"
	web.Package.Helm.Timeout = &metav1.Duration{Duration: 5 * time.Second}
	web.Package.Helm.Remediation = r
	e.update(t, asm, web)
	return ns, asm, web
}

// testHelmRetryOnFailure: a sync asking for RetryOnFailure gets Flux's
// strategy on its HelmRelease; its failed upgrade is not rolled back (2.0.0
// stays installed, its Deployment too), helm-controller tries it again on
// its own every retryInterval, and a new version recovers.
func (e *env) testHelmRetryOnFailure(t *testing.T) {
	g := NewWithT(t)
	ns, asm, web := e.failHelmUpgrade(t, "retry-on-failure", &fleeetv1.HelmRemediation{UpgradeStrategy: &fleeetv1.HelmUpgradeStrategy{
		Name: fleeetv1.RetryOnFailure, RetryInterval: &metav1.Duration{Duration: 10 * time.Second}}})
	var failedAt int
	g.Eventually(func(g Gomega) {
		var list helmv2.HelmReleaseList
		g.Expect(e.c.Client.List(t.Context(), &list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		hr := &list.Items[0]
		g.Expect(hr.Spec.Upgrade.Strategy).To(Equal(&helmv2.UpgradeStrategy{
			Name: string(helmv2.ActionStrategyRetryOnFailure), RetryInterval: &metav1.Duration{Duration: 10 * time.Second}}))
		g.Expect(hr.Spec.Upgrade.Remediation).To(BeNil())
		latest := hr.Status.History.Latest()
		g.Expect(latest).NotTo(BeNil())
		g.Expect(latest.ChartVersion).To(Equal("2.0.0"))
		g.Expect(latest.Status).To(Equal("failed"), "%+v", latest)
		failedAt = latest.Version
		g.Expect(e.syncStatus(g, asm, "web").State).NotTo(Equal(fleeetv1.SyncReady))
	}, timeout, poll).Should(Succeed())
	var cm corev1.ConfigMap
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web-web"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("chartVersion", "2.0.0"), "not rolled back")
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web-web"}, &appsv1.Deployment{})).To(Succeed(),
		"2.0.0's Deployment stays to be looked at")
	g.Eventually(func(g Gomega) {
		var list helmv2.HelmReleaseList
		g.Expect(e.c.Client.List(t.Context(), &list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		latest := list.Items[0].Status.History.Latest()
		g.Expect(latest).NotTo(BeNil())
		g.Expect(latest.Version).To(BeNumerically(">", failedAt), "helm-controller tried the upgrade again")
		g.Expect(latest.ChartVersion).To(Equal("2.0.0"))
	}, timeout, poll).Should(Succeed())

	web.Source.Helm.Version = "3.0.0"
	e.update(t, asm, web)
	done := e.waitReady(t, asm)
	g.Expect(done.Status.Syncs[0].Revision).To(Equal("3.0.0"))
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web-web"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("chartVersion", "3.0.0"))
}

// testSOPSDecryption: a Secret encrypted with the sops CLI to a fresh age
// key is committed to git. kustomize-controller decrypts it with the key
// Secret the sync names and applies the plain Secret; the same manifest in
// a sync without decryption fails, saying why, and applies nothing.
func (e *env) testSOPSDecryption(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	key := testenv.NewSOPSKey(t)
	const password = "correct horse battery staple"
	// data, not stringData: kustomize-controller v1.9.5 converts a Secret's
	// stringData into data before it looks for SOPS metadata, losing it, so
	// an encrypted stringData Secret in a sync without decryption is applied
	// as ciphertext instead of failing (seen here).
	b64 := base64.StdEncoding.EncodeToString([]byte(password))
	encrypted := key.Encrypt(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  password: "+b64+"\n")
	g.Expect(encrypted).NotTo(Or(ContainSubstring(password), ContainSubstring(b64)))
	g.Expect(encrypted).To(ContainSubstring("sops:"))
	url, _ := testenv.NewGitServer(t).Commit(t, "secrets", map[string]string{
		"db/kustomization.yaml": "resources: [secret.yaml]\n",
		"db/secret.yaml":        encrypted,
	}, "v1.0.0")
	sync := func(ns string, decryption *fleeetv1.KustomizeDecryption) fleeetv1.NamedSync {
		return fleeetv1.NamedSync{Name: "db", SyncSpec: fleeetv1.SyncSpec{
			Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: url, Tag: "v1.0.0"}},
			Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{
				Path: "./db", TargetNamespace: ns, Decryption: decryption}},
		}}
	}

	ns := e.c.Namespace(t, "sops", nil)
	g.Expect(e.c.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sops-age", Namespace: ns},
		Data: key.SecretData()})).To(Succeed())
	e.waitReady(t, e.create(t, ns, sync(ns, &fleeetv1.KustomizeDecryption{SecretRef: fleeetv1.LocalObjectReference{Name: "sops-age"}})))
	var secret corev1.Secret
	g.Expect(e.c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "db"}, &secret)).To(Succeed())
	g.Expect(string(secret.Data["password"])).To(Equal(password), "decrypted downstream")

	locked := e.c.Namespace(t, "sops-locked", nil)
	asm := e.create(t, locked, sync(locked, nil))
	g.Eventually(func(g Gomega) {
		st := e.syncStatus(g, asm, "db")
		g.Expect(st.State).To(Equal(fleeetv1.SyncFailed), "%+v", st)
		g.Expect(st.Message).To(ContainSubstring("is SOPS encrypted, configuring decryption is required"))
	}, timeout, poll).Should(Succeed())
	err := e.c.Client.Get(ctx, client.ObjectKey{Namespace: locked, Name: "db"}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing is applied encrypted: %v", err)
}

// testForce: a ConfigMap marked immutable whose data changes in the next
// version is refused by the apiserver, and the sync fails naming why; with
// force, kustomize-controller deletes it and creates it anew.
func (e *env) testForce(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "force", nil)
	git := testenv.NewGitServer(t)
	files := func(version string) map[string]string {
		return map[string]string{
			"settings/kustomization.yaml": "resources: [configmap.yaml]\n",
			"settings/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\nimmutable: true\n" +
				"data:\n  version: " + version + "\n",
		}
	}
	url, _ := git.Commit(t, "settings", files("v1"), "v1.0.0")
	git.Commit(t, "settings", files("v2"), "v2.0.0")
	settings := func(tag string, force bool) fleeetv1.NamedSync {
		return fleeetv1.NamedSync{Name: "settings", SyncSpec: fleeetv1.SyncSpec{
			Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: url, Tag: tag}},
			Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{
				Path: "./settings", TargetNamespace: ns, Force: ptr.To(force)}},
		}}
	}
	asm := e.create(t, ns, settings("v1.0.0", false))
	e.waitReady(t, asm)

	e.update(t, asm, settings("v2.0.0", false))
	g.Eventually(func(g Gomega) {
		st := e.syncStatus(g, asm, "settings")
		g.Expect(st.State).To(Equal(fleeetv1.SyncFailed), "%+v", st)
		g.Expect(st.Message).To(ContainSubstring("immutable"))
	}, timeout, poll).Should(Succeed())

	e.update(t, asm, settings("v2.0.0", true))
	e.waitReady(t, asm)
	var cm corev1.ConfigMap
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "settings"}, &cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("version", "v2"), "recreated at the new version")
}

// testPostRenderers: a helm sync's post-renderer patch changes what the
// chart renders before Helm installs it, and createNamespace has Helm make
// the target namespace.
func (e *env) testPostRenderers(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "post-render", nil)
	web := e.hr("web", "web", "1.0.0")
	web.Package.Helm.PostRenderers = []fleeetv1.KustomizePatch{{
		Patch:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-web\n  labels:\n    team: a\n",
		Target: &fleeetv1.PatchTarget{Kind: "ConfigMap"},
	}}
	e.waitReady(t, e.create(t, ns, web))
	var cm corev1.ConfigMap
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web-web"}, &cm)).To(Succeed())
	g.Expect(cm.Labels).To(HaveKeyWithValue("team", "a"))
	g.Expect(cm.Data).To(HaveKeyWithValue("chartVersion", "1.0.0"), "the rest as the chart renders it")

	// createNamespace: Helm makes a missing target namespace at install.
	target := ns + "-made"
	made := e.hr("made", "web", "1.0.0")
	made.Package.Helm.TargetNamespace, made.Package.Helm.CreateNamespace = target, true
	t.Cleanup(func() {
		_ = e.c.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: target}})
	})
	e.waitReady(t, e.create(t, e.c.Namespace(t, "create-ns", nil), made))
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: target, Name: "made-web"}, &cm)).To(Succeed())
}

// testHealthChecks: a kustomize sync with wait off and a health check on a
// ConfigMap it does not apply stays short of Ready while that ConfigMap is
// missing (without the check it is Ready as soon as it applied), and is
// Ready once someone creates it.
func (e *env) testHealthChecks(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "health-checks", nil)
	app := e.ks(ns, "app", "v1.0.0", "./configmap")
	app.Package.Kustomize.Wait = ptr.To(false)
	// No namespace: the sync's own (its targetNamespace) is looked in.
	app.Package.Kustomize.HealthChecks = []fleeetv1.HealthCheckReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "flag"}}
	asm := e.create(t, ns, app)
	g.Eventually(func(g Gomega) {
		g.Expect(e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app"}, &corev1.ConfigMap{})).To(Succeed())
	}, timeout, poll).Should(Succeed(), "applied")
	g.Consistently(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "app").State).NotTo(Equal(fleeetv1.SyncReady))
	}, 5*time.Second, poll).Should(Succeed(), "held by the missing ConfigMap")
	g.Expect(e.c.Client.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "flag"}})).To(Succeed())
	e.waitReady(t, asm)
}

// testHealthCheckExprs: kstatus counts a custom resource without status
// as ready at once; a CEL expression on its kind holds the sync until the
// expression says it is ready.
func (e *env) testHealthCheckExprs(t *testing.T) {
	g := NewWithT(t)
	ns := e.c.Namespace(t, "health-exprs", nil)
	widget := e.ks(ns, "widget", "v1.0.0", "./widget", "crds")
	widget.Package.Kustomize.HealthCheckExprs = []fleeetv1.HealthCheckExpr{{
		APIVersion: "example.fleeet.dev/v1", Kind: "Widget", Current: "spec.ready == true"}}
	asm := e.create(t, ns, e.ks(ns, "crds", "v1.0.0", "./crds"), widget)
	g.Eventually(func() error { return e.getExample(ns, "Widget", "widget") }, timeout, poll).Should(Succeed(), "applied")
	g.Consistently(func(g Gomega) {
		g.Expect(e.syncStatus(g, asm, "widget").State).NotTo(Equal(fleeetv1.SyncReady))
	}, 5*time.Second, poll).Should(Succeed(), "held by its expression")

	// What a controller of widgets would do once the widget works.
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("example.fleeet.dev/v1")
	obj.SetKind("Widget")
	obj.SetNamespace(ns)
	obj.SetName("widget")
	g.Expect(testenv.Change(t.Context(), e.c.Client, obj, func(obj *unstructured.Unstructured) {
		g.Expect(unstructured.SetNestedField(obj.Object, true, "spec", "ready")).To(Succeed())
	})).To(Succeed())
	e.waitReady(t, asm)
}
