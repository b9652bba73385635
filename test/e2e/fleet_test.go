package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/demo"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// TestTheDemoFleetRollsOutAndRevokes runs `make demo`'s fleet, then rolls a
// new app version out under maxUnavailable=1, stops the management
// apiserver for a minute, and revokes one cluster.
func TestTheDemoFleetRollsOutAndRevokes(t *testing.T) {
	g := testenv.Assertions(t)
	ctx := t.Context()
	var progress bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("what the demo fleet did:\n%s", progress.String())
		}
	})
	fleet := demo.Start(t, &progress)
	if err := fleet.WaitConverged(ctx, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	g.Consistently(func(g Gomega) [][]string { return statusCells(ctx, g, fleet) }, 5*time.Second, time.Second).Should(Equal([][]string{
		{"REMOTE", "app@0.1.0", "platform@v1.0.0"},
		{"edge-1", "ready", "0.1.0", "ready", "v1.0.0"},
		{"edge-2", "ready", "0.1.0", "ready", "v1.0.0"},
		{"edge-3", "ready", "0.1.0", "ready", "v1.0.0"},
	}), "a converged fleet stays converged")
	for _, name := range demo.Names {
		g.Expect(widget(t, fleet.Downstream[name])).To(Equal("small"), "the app's Widget runs on %s", name)
	}

	// A new app version, rolled out one cluster at a time. Its Widget is
	// large, which a ValidatingAdmissionPolicy on edge-2 forbids, so Helm
	// cannot upgrade there: the rollout pauses at edge-2 and edge-3 keeps
	// 0.1.0 until edge-2 is repaired.
	chart := filepath.Join(t.TempDir(), "widget")
	g.Expect(os.CopyFS(chart, os.DirFS(testenv.ChartDir("widget")))).To(Succeed())
	chartYAML, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(chart, "Chart.yaml"), bytes.Replace(chartYAML, []byte("version: 0.1.0"), []byte("version: 0.2.0"), 1), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(chart, "values.yaml"), []byte("size: large\n"), 0o644)).To(Succeed())
	repo := testenv.NewChartRepo(t, chart)
	edge2 := fleet.Downstream["edge-2"]
	binding := smallWidgetsOnly(t, edge2)

	app := &fleeetv1.Module{}
	c := fleet.Management.Client
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: "app"}, app)).To(Succeed())
	app.Spec.Sync.Source.Helm.URL, app.Spec.Sync.Source.Helm.Version = repo.URL, "0.2.0"
	g.Expect(c.Update(ctx, app)).To(Succeed())

	ro := &rollout{syncName: "app", version: "0.2.0"}
	testenv.WatchUntil(t, fleet.Management, &fleeetv1.ProxyAssemblageList{}, demo.Tenant, 5*time.Minute, "app 0.2.0 failed on edge-2", func(ev watch.Event) bool {
		return ro.see(ev) && ro.state["edge-2"] == fleeetv1.SyncFailed
	})
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: "app"}, app)).To(Succeed())
		paused := apimeta.FindStatusCondition(app.Status.Conditions, fleeetv1.RolloutPausedCondition)
		g.Expect(paused).NotTo(BeNil())
		g.Expect(paused.Message).To(And(HavePrefix("Remote edge-2 failed on generation"), ContainSubstring("this cluster runs small Widgets only")))
	}, time.Minute, time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) string {
		pa := &fleeetv1.ProxyAssemblage{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: "edge-3"}, pa)).To(Succeed())
		return compile.Find(pa.Spec.Assemblage.Syncs, "app").Source.Helm.Version
	}, 10*time.Second, time.Second).Should(Equal("0.1.0"), "edge-3 waits while the rollout is paused")
	// helm-controller retries the upgrade (rolling each failure back) before
	// it gives up; edge-2 shows failed for good once it has.
	g.Eventually(func(g Gomega) [][]string { return statusCells(ctx, g, fleet) }, 2*time.Minute, time.Second).Should(Equal([][]string{
		{"REMOTE", "app@0.2.0", "platform@v1.0.0"},
		{"edge-1", "ready", "0.2.0", "ready", "v1.0.0"},
		{"edge-2", "failed", "0.2.0", "ready", "v1.0.0"},
		{"edge-3", "ready", "0.1.0*", "ready", "v1.0.0"},
	}))
	out, err := fleet.Fleetctl(ctx, "why", "app", "--remote", "edge-2")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(And(ContainSubstring("Module team-a/app at 0.2.0 on Remote edge-2: failed"), ContainSubstring("this cluster runs small Widgets only")))
	out, err = fleet.Fleetctl(ctx, "why", "app", "--remote", "edge-3")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("rolling update paused by Remote edge-2"))

	// Repaired: the policy binding goes and, once the apiserver has stopped
	// enforcing it, the platform engineer asks edge-2 to retry from the
	// management cluster (helm-controller gave up after one attempt).
	g.Expect(edge2.Client.Delete(ctx, binding)).To(Succeed())
	g.Eventually(func() error { return createLargeWidget(ctx, edge2) }, time.Minute, time.Second).Should(Succeed())
	out, err = fleet.Fleetctl(ctx, "retry", "edge-2")
	g.Expect(err).NotTo(HaveOccurred(), out)
	testenv.WatchUntil(t, fleet.Management, &fleeetv1.ProxyAssemblageList{}, demo.Tenant, 5*time.Minute, "app 0.2.0 Ready everywhere", func(ev watch.Event) bool {
		return ro.see(ev) && ro.count(fleeetv1.SyncReady) == len(demo.Names)
	})
	g.Expect(ro.maxMoving).To(Equal(1), "at most one cluster was moving at any moment, and one was")
	for _, name := range demo.Names {
		g.Eventually(func() string { return widget(t, fleet.Downstream[name]) }, time.Minute, time.Second).Should(Equal("large"))
	}
	out, err = fleet.Fleetctl(ctx, "why", "app", "--remote", "edge-2")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("Module team-a/app at 0.2.0 on Remote edge-2: ready"))
	g.Expect(out).To(ContainSubstring("plan:         holds the current version 0.2.0"))

	// The management apiserver is down for a minute: every cluster keeps
	// what it runs and says it cannot reach upstream; then all reconnect.
	stopped := time.Now()
	g.Expect(fleet.Management.StopAPIServer()).To(Succeed())
	for _, name := range demo.Names {
		g.Eventually(func(g Gomega) {
			c := upstreamCondition(g, fleet.Downstream[name], fleeetv1.ConnectedCondition)
			g.Expect(c.Reason).To(Equal("Unreachable"))
		}, time.Minute, time.Second).Should(Succeed(), "%s notices", name)
	}
	g.Consistently(func(g Gomega) {
		for _, name := range demo.Names {
			g.Expect(widget(t, fleet.Downstream[name])).To(Equal("large"), "nothing deleted on %s", name)
			g.Expect(fleet.Downstream[name].Client.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: demo.Tenant}, &fleeetv1.Assemblage{})).To(Succeed())
		}
	}, time.Until(stopped.Add(time.Minute)), 5*time.Second).Should(Succeed(), "for the rest of the minute")
	g.Expect(fleet.Management.StartAPIServer()).To(Succeed())
	for _, name := range demo.Names {
		g.Eventually(func(g Gomega) {
			g.Expect(upstreamCondition(g, fleet.Downstream[name], fleeetv1.ConnectedCondition).Status).To(Equal(metav1.ConditionTrue))
		}, 2*time.Minute, time.Second).Should(Succeed(), "%s reconnects", name)
	}
	if err := fleet.WaitConverged(ctx, 2*time.Minute); err != nil {
		t.Fatalf("after the outage: %v", err)
	}

	// Revoking edge-3: its Remote and identity go, its workloads stay, its
	// credential stops working.
	edge3 := fleet.Downstream["edge-3"]
	stored := &corev1.Secret{}
	g.Expect(edge3.Client.Get(ctx, client.ObjectKey{Namespace: demo.AgentNamespace, Name: demo.Tenant + "-credential"}, stored)).To(Succeed())
	out, err = fleet.Fleetctl(ctx, "revoke", "edge-3")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("remote/edge-3 revoked: identity fleeet-remote-edge-3 deleted\n"))
	g.Eventually(func(g Gomega) {
		g.Expect(upstreamCondition(g, edge3, fleeetv1.RegisteredCondition).Reason).To(Equal("Revoked"))
	}, 2*time.Minute, time.Second).Should(Succeed())
	g.Consistently(func() string { return widget(t, edge3) }, 10*time.Second, time.Second).Should(Equal("large"),
		"a revoked cluster keeps running what it ran")
	cfg := rest.AnonymousClientConfig(fleet.Management.Config)
	cfg.BearerToken = string(stored.Data[credential.TokenKey])
	revoked, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	err = revoked.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: "edge-3"}, &fleeetv1.ProxyAssemblage{})
	g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "the revoked cluster's credential no longer authenticates: %v", err)
	status, err := fleet.Fleetctl(ctx, "status")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Split(strings.TrimSpace(status), "\n")).To(Equal([]string{
		"REMOTE  app@0.2.0    platform@v1.0.0",
		"edge-1  ready 0.2.0  ready v1.0.0",
		"edge-2  ready 0.2.0  ready v1.0.0",
	}))
}

// smallWidgetsOnly makes a cluster refuse large Widgets with a
// ValidatingAdmissionPolicy, and returns its binding.
func smallWidgetsOnly(t *testing.T, c *testenv.Cluster) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	g := NewWithT(t)
	ctx := t.Context()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "small-widgets-only"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.fleeet.dev"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.size != 'large'", Message: "this cluster runs small Widgets only"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "small-widgets-only"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	g.Expect(c.Client.Create(ctx, policy)).To(Succeed())
	g.Expect(c.Client.Create(ctx, binding)).To(Succeed())
	// The apiserver loads policies asynchronously.
	g.Eventually(func() error { return createLargeWidget(ctx, c) }, time.Minute, time.Second).
		Should(MatchError(ContainSubstring("this cluster runs small Widgets only")))
	return binding
}

// createLargeWidget asks a cluster, in a dry run, to create a large Widget.
func createLargeWidget(ctx context.Context, c *testenv.Cluster) error {
	large := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.fleeet.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": demo.Tenant, "name": "probe"},
		"spec":     map[string]any{"size": "large"},
	}}
	return c.Client.Create(ctx, large, client.DryRunAll)
}

// rollout follows every change of every plan during the rollout of one
// sync version. A cluster is moving while its plan holds the version and
// it does not report it Ready.
type rollout struct {
	syncName, version string
	// version held and state reported, per cluster; state is empty while the
	// cluster has not reported on the plan's current generation.
	versions  map[string]string
	state     map[string]fleeetv1.SyncState
	maxMoving int
}

// see records one watch event; it reports whether it was a plan.
func (r *rollout) see(ev watch.Event) bool {
	pa, ok := ev.Object.(*fleeetv1.ProxyAssemblage)
	if !ok {
		return false
	}
	if r.versions == nil {
		r.versions, r.state = map[string]string{}, map[string]fleeetv1.SyncState{}
	}
	r.versions[pa.Name], r.state[pa.Name] = "", ""
	if held := compile.Find(pa.Spec.Assemblage.Syncs, r.syncName); held != nil {
		r.versions[pa.Name] = held.Source.Helm.Version
	}
	if s := pa.ReportedSync(r.syncName); s != nil {
		r.state[pa.Name] = s.State
	}
	moving := 0
	for name, v := range r.versions {
		if v == r.version && r.state[name] != fleeetv1.SyncReady {
			moving++
		}
	}
	r.maxMoving = max(r.maxMoving, moving)
	return true
}

// count is how many clusters hold the version in a state.
func (r *rollout) count(state fleeetv1.SyncState) int {
	n := 0
	for name, v := range r.versions {
		if v == r.version && r.state[name] == state {
			n++
		}
	}
	return n
}

// statusCells is `fleetctl status` split into words, line by line.
func statusCells(ctx context.Context, g Gomega, fleet *demo.Fleet) [][]string {
	out, err := fleet.Fleetctl(ctx, "status")
	g.Expect(err).NotTo(HaveOccurred())
	var cells [][]string
	for line := range strings.Lines(strings.TrimSpace(out)) {
		cells = append(cells, strings.Fields(line))
	}
	return cells
}

// upstreamCondition returns one condition of a cluster's Upstream.
func upstreamCondition(g Gomega, c *testenv.Cluster, typ string) *metav1.Condition {
	up := &fleeetv1.Upstream{}
	g.Expect(c.Client.Get(context.Background(), client.ObjectKey{Namespace: demo.AgentNamespace, Name: demo.Tenant}, up)).To(Succeed())
	cond := apimeta.FindStatusCondition(up.Status.Conditions, typ)
	g.Expect(cond).NotTo(BeNil(), "Upstream condition %s", typ)
	return cond
}

// widget returns the size of the app's Widget in a downstream cluster, or
// "" while there is none.
func widget(t *testing.T, c *testenv.Cluster) string {
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("example.fleeet.dev/v1")
	w.SetKind("Widget")
	if err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: demo.Tenant, Name: "app"}, w); err != nil {
		t.Logf("Widget on %s: %v", c.Name, err)
		return ""
	}
	size, _, _ := unstructured.NestedString(w.Object, "spec", "size")
	return size
}
