package compiler_test

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/compiler"
	"github.com/fleeet-dev/fleeet/internal/policy"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
	"github.com/fleeet-dev/fleeet/internal/webhooks"
)

var everyRemote = &metav1.LabelSelector{}

// patch merges a JSON patch into obj as the cluster administrator.
func patch(t *testing.T, obj client.Object, format string, args ...any) {
	t.Helper()
	p := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, format, args...))
	NewWithT(t).Expect(cluster.Client.Patch(t.Context(), obj, p)).To(Succeed())
}

// retag moves a Module to another tag of its repository.
func retag(t *testing.T, m *fleeetv1.Module, tag string) {
	t.Helper()
	patch(t, m, `{"spec":{"sync":{"source":{"git":{"tag":%q}}}}}`, tag)
}

// compilerBehindWebhook starts an apiserver of its own with the manager's
// admission webhook in front of it, refusing plans over webhookBytes, and
// the compiler alone, writing plans within compilerBytes (0: no limit).
func compilerBehindWebhook(t testenv.TB, webhookBytes, compilerBytes int) *testenv.Cluster {
	c, _ := startBehindWebhook(t, behindWebhook{webhookBytes: webhookBytes, compilerBytes: compilerBytes})
	return c
}

// managerUser is the user the chart's manager ServiceAccount is, as
// config/webhook (the chart rendered in fleeet-system) names it.
const managerUser = "system:serviceaccount:fleeet-system:fleet-manager"

// behindWebhook says how startBehindWebhook sets up the webhook and the
// compiler.
type behindWebhook struct {
	// webhookBytes is the webhook's plan size limit (0: the manager's
	// default), compilerBytes the compiler's (0: none).
	webhookBytes, compilerBytes int
	// policies are user policies (file name → Rego), in force in the
	// webhook and in the compiler's judge.
	policies map[string]string
	// asManager runs the compiler as managerUser, judging its own plan
	// writes in process (compiler.Reconciler.Judge) as the manager does,
	// so that the webhook's matchConditions skip those naming content.
	asManager bool
	// seen is told of each request the webhook gets, when set.
	seen func(admission.Request)
}

// startBehindWebhook starts an apiserver of its own with the manager's
// admission webhook in front of it, and the compiler alone, as o says. It
// returns the apiserver and a client acting as the user the compiler
// writes as, for what only the manager may write (a Remote's status).
func startBehindWebhook(t testenv.TB, o behindWebhook) (*testenv.Cluster, client.Client) {
	g := NewWithT(t)
	c := testenv.StartCluster(t, "management", testenv.WithWebhooks())
	as := c
	if o.asManager {
		// The test's admin, impersonating the ServiceAccount; RBAC lets
		// it through as system:masters.
		as = &testenv.Cluster{}
		*as = *c
		as.Config = rest.CopyConfig(c.Config)
		as.Config.Impersonate = rest.ImpersonationConfig{UserName: managerUser, Groups: []string{"system:serviceaccounts",
			"system:serviceaccounts:fleeet-system", "system:authenticated", "system:masters"}}
	}
	manager, err := client.New(as.Config, client.Options{Scheme: testenv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	review := &authenticationv1.SelfSubjectReview{}
	g.Expect(manager.Create(t.Context(), review)).To(Succeed())
	engine, err := policy.New(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(engine.SetUserPolicies(t.Context(), o.policies)).To(Succeed())
	testenv.RunManager(t, as, "compiler", func(ctx context.Context, mgr ctrl.Manager) error {
		policies := &webhooks.Policies{
			Engine: engine, Reader: mgr.GetClient(), LiveReader: mgr.GetAPIReader(),
			Registrations: &webhooks.Registrations{Reader: mgr.GetAPIReader()},
			// The compiler writes as the manager does, with the same
			// identity.
			ManagerUsername: review.Status.UserInfo.Username,
			MaxPlanBytes:    cmp.Or(o.webhookBytes, compile.DefaultMaxPlanBytes), Timeout: 5 * time.Second, Concurrency: 4,
		}
		var handler admission.Handler = policies
		if o.seen != nil {
			handler = seeing{Handler: handler, seen: o.seen}
		}
		mgr.GetWebhookServer().Register(webhooks.Path, &admission.Webhook{Handler: handler})
		r := &compiler.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-manager"),
			MaxPlanBytes: o.compilerBytes}
		if o.asManager {
			r.Judge, r.User = policies, review.Status.UserInfo
		}
		return r.SetupWithManager(ctx, mgr)
	})
	return c, manager
}

// seeing tells seen of each request before Handler judges it.
type seeing struct {
	admission.Handler
	seen func(admission.Request)
}

// Handle implements admission.Handler.
func (s seeing) Handle(ctx context.Context, req admission.Request) admission.Response {
	s.seen(req)
	return s.Handler.Handle(ctx, req)
}

// held returns the plan of Remote ns/name in c, and the tag of each of its
// syncs by name.
func held(g Gomega, c client.Client, ns, name string) (*fleeetv1.ProxyAssemblage, map[string]string) {
	pa := &fleeetv1.ProxyAssemblage{}
	g.ExpectWithOffset(1, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pa)).To(Succeed())
	tags := map[string]string{}
	for _, s := range pa.Spec.Assemblage.Syncs {
		tags[s.Name] = s.Source.Git.Tag
	}
	return pa, tags
}

// tagsOf returns, for Eventually, the tags the plan of Remote ns/name holds.
func tagsOf(ns, name string) func(Gomega) map[string]string {
	return func(g Gomega) map[string]string {
		_, tags := held(g, cluster.Client, ns, name)
		return tags
	}
}

func TestTheCompilerWritesEachRemoteThePlanOfTheModulesSelectingIt(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	prod := pullRemote(t, ns, "prod", map[string]string{"env": "prod"})
	dev := pullRemote(t, ns, "dev", map[string]string{"env": "dev"})
	bare := pullRemote(t, ns, "bare", nil)
	fleettest.CreateModule(t, cluster.Client, ns, "web", "v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
		func(m *fleeetv1.Module) { m.Labels = map[string]string{"tier": "web"} })
	base := fleettest.CreateModule(t, cluster.Client, ns, "base", "v2.0.0", everyRemote, nil)
	fleettest.CreateModule(t, cluster.Client, ns, "idle", "v3.0.0", nil, nil)

	g.Eventually(tagsOf(ns, "prod"), timeout, poll).Should(Equal(map[string]string{"base": "v2.0.0", "web": "v1.0.0"}))
	g.Eventually(tagsOf(ns, "dev"), timeout, poll).Should(Equal(map[string]string{"base": "v2.0.0"}))
	g.Eventually(tagsOf(ns, "bare"), timeout, poll).Should(Equal(map[string]string{"base": "v2.0.0"}))
	pa, _ := held(g, cluster.Client, ns, "prod")
	g.Expect(metav1.IsControlledBy(pa, prod)).To(BeTrue(), "the plan is the Remote's")
	g.Expect([]string{pa.Spec.Assemblage.Syncs[0].Name, pa.Spec.Assemblage.Syncs[1].Name}).To(Equal([]string{"base", "web"}), "sorted by name")
	g.Expect(pa.Spec.Assemblage.Syncs[1].Labels).To(Equal(map[string]string{"tier": "web"}), "the Module's labels travel with its sync")

	// A Remote's labels, and a Module's selector, decide which plans hold
	// the Module's sync.
	patch(t, dev, `{"metadata":{"labels":{"env":"prod"}}}`)
	g.Eventually(tagsOf(ns, "dev"), timeout, poll).Should(Equal(map[string]string{"base": "v2.0.0", "web": "v1.0.0"}))
	patch(t, base, `{"spec":{"selector":{"matchLabels":{"env":"prod"}}}}`)
	g.Eventually(tagsOf(ns, "bare"), timeout, poll).Should(BeEmpty(), "a sync leaves the plans it no longer selects")
	g.Expect(cluster.Client.Delete(t.Context(), base)).To(Succeed())
	g.Eventually(tagsOf(ns, "prod"), timeout, poll).Should(Equal(map[string]string{"web": "v1.0.0"}))

	// No garbage collector runs here: the compiler deletes the plan itself.
	g.Expect(cluster.Client.Delete(t.Context(), bare)).To(Succeed())
	g.Eventually(func() error {
		return cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(bare), &fleeetv1.ProxyAssemblage{})
	}, timeout, poll).Should(Satisfy(apierrors.IsNotFound))
}

// With a rolling update, only the rollout's admissions move a Remote to a
// Module's new version. A second Module changed last shows when a Remote's
// plan was compiled after the admissions.
func TestTheCompilerMovesARemoteOnlyOnceTheRolloutAdmitsIt(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	pullRemote(t, ns, "edge-1", nil)
	pullRemote(t, ns, "edge-2", nil)
	app := fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, func(m *fleeetv1.Module) {
		m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
	})
	marker := fleettest.CreateModule(t, cluster.Client, ns, "marker", "m1", everyRemote, nil)
	for _, name := range []string{"edge-1", "edge-2"} {
		g.Eventually(tagsOf(ns, name), timeout, poll).Should(Equal(map[string]string{"app": "v1.0.0", "marker": "m1"}))
	}

	admit := func(remotes ...string) {
		get(g, app)
		app.Status.Rollout = &fleeetv1.RolloutStatus{Revision: compile.ModuleRevision(app), Admitted: remotes}
		g.Expect(cluster.Client.Status().Update(t.Context(), app)).To(Succeed())
	}
	retag(t, app, "v2.0.0")
	admit("edge-1")
	retag(t, marker, "m2")
	g.Eventually(tagsOf(ns, "edge-1"), timeout, poll).Should(Equal(map[string]string{"app": "v2.0.0", "marker": "m2"}))
	g.Eventually(tagsOf(ns, "edge-2"), timeout, poll).Should(Equal(map[string]string{"app": "v1.0.0", "marker": "m2"}),
		"not admitted, edge-2 keeps the version it holds")

	admit("edge-2")
	g.Eventually(tagsOf(ns, "edge-2"), timeout, poll).Should(Equal(map[string]string{"app": "v2.0.0", "marker": "m2"}))
}

// A rollback puts the version it returns to on every Remote holding the
// failed one or nothing, and stamps the plan with that version's revision;
// a Remote on any other version keeps it.
func TestTheCompilerRollsBackOnlyTheRemotesOnTheFailedVersion(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	pullRemote(t, ns, "edge-1", nil)
	pullRemote(t, ns, "edge-2", nil)
	app := fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, func(m *fleeetv1.Module) {
		m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
	})
	g.Eventually(tagsOf(ns, "edge-2"), timeout, poll).Should(Equal(map[string]string{"app": "v1.0.0"}))
	get(g, app)
	good := fleeetv1.RolloutRecord{Revision: compile.ModuleRevision(app), Version: "v1.0.0", Outcome: fleeetv1.RolloutSucceeded,
		Time: metav1.Now(), Sync: app.Spec.Sync}
	good.Sync.Source.Git.Tag = "v0.9.0" // what v1.0.0 was called when it was Ready: the record is what is compiled
	good.Revision = compile.Revision(&good.Sync, nil, nil)

	retag(t, app, "v2.0.0")
	g.Eventually(func(g Gomega) {
		get(g, app)
		app.Status.Rollout = &fleeetv1.RolloutStatus{Revision: compile.ModuleRevision(app), Admitted: []string{"edge-1"}}
		g.Expect(cluster.Client.Status().Update(t.Context(), app)).To(Succeed())
	}, timeout, poll).Should(Succeed())
	g.Eventually(tagsOf(ns, "edge-1"), timeout, poll).Should(Equal(map[string]string{"app": "v2.0.0"}))

	g.Eventually(func(g Gomega) {
		get(g, app)
		app.Status.History = []fleeetv1.RolloutRecord{good}
		app.Status.Rollout.RolledBack = &fleeetv1.Rollback{To: good.Revision, Version: "v0.9.0", Message: "test", Time: metav1.Now()}
		g.Expect(cluster.Client.Status().Update(t.Context(), app)).To(Succeed())
	}, timeout, poll).Should(Succeed())
	g.Eventually(tagsOf(ns, "edge-1"), timeout, poll).Should(Equal(map[string]string{"app": "v0.9.0"}), "back from the failed version")
	g.Consistently(tagsOf(ns, "edge-2"), 2*time.Second, poll).Should(Equal(map[string]string{"app": "v1.0.0"}),
		"a Remote that never moved keeps what it holds")
	for name, pending := range map[string]bool{"edge-1": false, "edge-2": true} {
		pa, _ := held(g, cluster.Client, ns, name)
		stamp := pa.CompiledSyncs()["app"]
		g.Expect(stamp.Revision).To(Equal(good.Revision), "Remote %s", name)
		g.Expect(stamp.Pending).To(Equal(pending), "Remote %s", name)
	}
}

// A binding the compiler cannot resolve for a Remote is reported on the
// Module, and the Remote keeps the sync it holds, at its old version too.
// A change of a ConfigMap a binding reads reaches the plan.
func TestTheCompilerKeepsWhatARemoteHoldsWhenABindingFails(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	pullRemote(t, ns, "edge-1", nil)
	fleet := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet"}, Data: map[string]string{"domain": "example.com"}}
	g.Expect(cluster.Client.Create(t.Context(), fleet)).To(Succeed())
	app := fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, func(m *fleeetv1.Module) {
		m.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{{Name: "DOMAIN",
			ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "ConfigMap", Name: "fleet", FieldPath: "/data/domain"}}}
		m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"host": "app.$(DOMAIN)"}
	})
	host := func(g Gomega) string {
		pa, _ := held(g, cluster.Client, ns, "edge-1")
		g.Expect(pa.Spec.Assemblage.Syncs).To(HaveLen(1))
		return pa.Spec.Assemblage.Syncs[0].Package.Kustomize.Substitute["host"]
	}
	g.Eventually(host, timeout, poll).Should(Equal("app.example.com"))

	patch(t, fleet, `{"data":{"domain":"example.org"}}`)
	g.Eventually(host, timeout, poll).Should(Equal("app.example.org"))

	patch(t, app, `{"spec":{"controlPlaneBindings":[{"name":"DOMAIN","objectFieldRef":{"kind":"ConfigMap","name":"fleet","fieldPath":"/data/gone"}}],"sync":{"source":{"git":{"tag":"v2.0.0"}}}}}`)
	g.Eventually(func(g Gomega) []string {
		return warnings(g, cluster.Client, ns, "Module", "app", fleeetv1.ReasonBindingFailed)
	}, timeout, poll).Should(ContainElement(HavePrefix("Remote edge-1: spec.controlPlaneBindings[DOMAIN]: ConfigMap fleet: ")))
	g.Expect(host(g)).To(Equal("app.example.org"))
	g.Expect(tagsOf(ns, "edge-1")(g)).To(Equal(map[string]string{"app": "v1.0.0"}))
}

// A suspended Module holds every plan at the version it had and reaches no
// new Remote; a suspended Remote's plan is left as it is. Each catches up
// when resumed.
func TestSuspensionHoldsThePlansAsTheyAre(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	running := pullRemote(t, ns, "running", nil)
	app := fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, nil)
	marker := fleettest.CreateModule(t, cluster.Client, ns, "marker", "m1", everyRemote, nil)
	g.Eventually(tagsOf(ns, "running"), timeout, poll).Should(Equal(map[string]string{"app": "v1.0.0", "marker": "m1"}))

	patch(t, app, `{"spec":{"suspend":true}}`)
	retag(t, app, "v2.0.0")
	pullRemote(t, ns, "late", nil)
	retag(t, marker, "m2")
	g.Eventually(tagsOf(ns, "running"), timeout, poll).Should(Equal(map[string]string{"app": "v1.0.0", "marker": "m2"}))
	g.Eventually(tagsOf(ns, "late"), timeout, poll).Should(Equal(map[string]string{"marker": "m2"}),
		"a Remote that held nothing gets nothing from a suspended Module")

	patch(t, running, `{"spec":{"suspend":true}}`)
	patch(t, app, `{"spec":{"suspend":false}}`)
	g.Eventually(tagsOf(ns, "late"), timeout, poll).Should(Equal(map[string]string{"app": "v2.0.0", "marker": "m2"}))
	g.Consistently(tagsOf(ns, "running"), 2*time.Second, poll).Should(Equal(map[string]string{"app": "v1.0.0", "marker": "m2"}))

	patch(t, running, `{"spec":{"suspend":false}}`)
	g.Eventually(tagsOf(ns, "running"), timeout, poll).Should(Equal(map[string]string{"app": "v2.0.0", "marker": "m2"}))
}

// A Remote that came through a RegistrationToken gets a plan only once the
// manager has adopted it: until then its labels are the registrant's, not
// the token's, and selectors and bindings would read the wrong ones.
func TestARegisteredRemoteGetsAPlanOnlyOnceAdopted(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, nil)
	edge := pullRemote(t, ns, "edge", map[string]string{fleeetv1.RegistrationTokenLabel: "edge"})
	g.Consistently(func() error {
		return cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(edge), &fleeetv1.ProxyAssemblage{})
	}, 2*time.Second, poll).Should(Satisfy(apierrors.IsNotFound), "no plan before adoption")

	patch(t, edge, `{"metadata":{"finalizers":["`+fleeetv1.RemoteIdentityFinalizer+`"]}}`)
	g.Eventually(tagsOf(ns, "edge"), timeout, poll).Should(Equal(map[string]string{"app": "v1.0.0"}))
}

// missingPlans is a cache that has not seen any ProxyAssemblage yet.
type missingPlans struct{ client.Client }

func (m missingPlans) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, plan := obj.(*fleeetv1.ProxyAssemblage); plan {
		return apierrors.NewNotFound(fleeetv1.GroupVersion.WithResource("proxyassemblages").GroupResource(), key.Name)
	}
	return m.Client.Get(ctx, key, obj, opts...)
}

// A plan that exists but is not cached yet is compiled again shortly, not
// put under the controller's error backoff (which, under load, held newly
// registered clusters back for minutes).
func TestAPlanTheCacheHasNotSeenIsCompiledAgainShortly(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	edge := pullRemote(t, ns, "edge", nil)
	fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, nil)
	g.Eventually(tagsOf(ns, "edge"), timeout, poll).Should(Equal(map[string]string{"app": "v1.0.0"}))

	lagging := &compiler.Reconciler{Client: missingPlans{cluster.Client}}
	result, err := lagging.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(edge)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(result.RequeueAfter).To(Equal(time.Second))
}

// The compiler ignores the echo of its own writes, not anyone else's; and
// a retry requested on the Remote reaches its plan.
func TestTheCompilerRestoresAPlanEditedByHandAndPassesOnRetries(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	r := pullRemote(t, ns, "edge-1", nil)
	fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, nil)
	g.Eventually(tagsOf(ns, "edge-1"), timeout, poll).Should(Equal(map[string]string{"app": "v1.0.0"}))

	g.Eventually(func(g Gomega) {
		pa, _ := held(g, cluster.Client, ns, "edge-1")
		pa.Spec.Assemblage.Syncs[0].Source.Git.Tag = "v0.9.0"
		pa.Spec.Assemblage.Syncs = append(pa.Spec.Assemblage.Syncs, fleeetv1.NamedSync{Name: "smuggled", SyncSpec: pa.Spec.Assemblage.Syncs[0].SyncSpec})
		g.Expect(cluster.Client.Update(t.Context(), pa)).To(Succeed())
	}, timeout, poll).Should(Succeed())
	g.Eventually(tagsOf(ns, "edge-1"), timeout, poll).Should(Equal(map[string]string{"app": "v1.0.0"}))

	patch(t, r, `{"metadata":{"annotations":{%q:"2030-01-01T00:00:00Z"}}}`, fleeetv1.RetryAnnotation)
	g.Eventually(func(g Gomega) string {
		pa, _ := held(g, cluster.Client, ns, "edge-1")
		return pa.Spec.Assemblage.RetryRequestedAt
	}, timeout, poll).Should(Equal("2030-01-01T00:00:00Z"))
}

// An admission policy (here the size limit) that refuses a Remote's plan
// leaves the Remote with what it held, and tells each Module whose sync the
// refused plan would have changed. This test has an apiserver of its own
// with the admission webhook in front of it.
func TestARefusedPlanLeavesTheRemoteWithWhatItHeldAndTellsTheModule(t *testing.T) {
	g := NewWithT(t)
	c := compilerBehindWebhook(t, 2048, 0)
	ns := c.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	g.Eventually(func() error { // once the webhook answers
		return c.Client.Create(t.Context(), &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-1"}})
	}, timeout, poll).Should(Succeed())
	fleettest.CreateModule(t, c.Client, ns, "small", "v1.0.0", everyRemote, nil)
	tags := func(g Gomega) map[string]string {
		_, tags := held(g, c.Client, ns, "edge-1")
		return tags
	}
	g.Eventually(tags, timeout, poll).Should(Equal(map[string]string{"small": "v1.0.0"}))

	big := fleettest.CreateModule(t, c.Client, ns, "big", "v1.0.0", everyRemote, func(m *fleeetv1.Module) {
		m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"filler": strings.Repeat("x", 3000)}
	})
	var denial string
	g.Eventually(func(g Gomega) {
		notes := warnings(g, c.Client, ns, "Module", "big", fleeetv1.ReasonPolicyDenied)
		g.Expect(notes).NotTo(BeEmpty())
		denial = notes[0]
	}, timeout, poll).Should(Succeed())
	g.Expect(denial).To(HavePrefix("Remote edge-1: plan refused by admission policy: "))
	g.Expect(denial).To(MatchRegexp(`spec: the plan of Remote edge-1 is \d+ bytes, over the 2048-byte limit \(--max-plan-bytes\)`))
	g.Expect(tags(g)).To(Equal(map[string]string{"small": "v1.0.0"}))
	g.Expect(warnings(g, c.Client, ns, "Module", "small", fleeetv1.ReasonPolicyDenied)).To(BeEmpty(),
		"the refused plan did not change small's sync")

	// A plan back under the limit is admitted.
	g.Expect(c.Client.Patch(t.Context(), big, client.RawPatch(types.MergePatchType,
		[]byte(`{"spec":{"sync":{"package":{"kustomize":{"substitute":{"filler":"x"}}}}}}`)))).To(Succeed())
	g.Eventually(tags, timeout, poll).Should(Equal(map[string]string{"small": "v1.0.0", "big": "v1.0.0"}))
}

// A Module too large for a Remote's plan is left out of it, on the plan's
// stamp and in a Warning event on the Module, and another Module's change
// still reaches the plan; once it fits again it goes in.
func TestAModuleTooLargeForThePlanIsLeftOutAndTheOthersStillMove(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	pullRemote(t, ns, "edge", nil)
	small := fleettest.CreateModule(t, cluster.Client, ns, "small", "v1.0.0", everyRemote, nil)
	g.Eventually(tagsOf(ns, "edge"), timeout, poll).Should(Equal(map[string]string{"small": "v1.0.0"}))

	big := fleettest.CreateModule(t, cluster.Client, ns, "big", "v1.0.0", everyRemote, func(m *fleeetv1.Module) {
		m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{}
		for i := range 20 {
			m.Spec.Sync.Package.Kustomize.Substitute[fmt.Sprintf("filler%d", i)] = strings.Repeat("x", 1000)
		}
	})
	stampOf := func(name string) func(Gomega) fleeetv1.Compiled {
		return func(g Gomega) fleeetv1.Compiled {
			pa, _ := held(g, cluster.Client, ns, "edge")
			return pa.CompiledSyncs()[name]
		}
	}
	g.Eventually(stampOf("big"), timeout, poll).Should(HaveField("TooLarge",
		MatchRegexp(`^left out of the plan of Remote edge: its sync alone makes a part of \d+ bytes, over the 16384-byte limit \(--max-plan-bytes\)$`)))
	g.Expect(tagsOf(ns, "edge")(g)).To(Equal(map[string]string{"small": "v1.0.0"}))
	g.Eventually(func(g Gomega) []string {
		return warnings(g, cluster.Client, ns, "Module", "big", fleeetv1.ReasonPlanTooLarge)
	}, timeout, poll).Should(ConsistOf(HaveSuffix("the Remote holds nothing of it, and the other Modules' changes go on")))

	retag(t, small, "v2.0.0")
	g.Eventually(tagsOf(ns, "edge"), timeout, poll).Should(Equal(map[string]string{"small": "v2.0.0"}))
	g.Expect(stampOf("big")(g).TooLarge).NotTo(BeEmpty())
	pa, _ := held(g, cluster.Client, ns, "edge")
	g.Expect(compile.PlanBytes(&pa.Spec)).To(BeNumerically("<=", maxPlanBytes))

	// Back under the limit, it goes in.
	patch(t, big, `{"spec":{"sync":{"package":{"kustomize":{"substitute":null}}}}}`)
	g.Eventually(tagsOf(ns, "edge"), timeout, poll).Should(Equal(map[string]string{"small": "v2.0.0", "big": "v1.0.0"}))
	g.Expect(stampOf("big")(g).TooLarge).To(BeEmpty())
}
