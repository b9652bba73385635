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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/demo"
	"github.com/fleeet-dev/fleeet/internal/enrol"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// TestTheDemoFleetRollsOutAndRevokes runs `make demo`'s fleet, then rolls a
// new app version out under maxUnavailable=1, stops the management
// apiserver for a minute, and revokes one cluster.
func TestTheDemoFleetRollsOutAndRevokes(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	var progress bytes.Buffer
	fleet := demo.Start(t, &progress)
	if err := fleet.WaitConverged(ctx, 5*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	status, err := fleet.Status(ctx, "status")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Split(strings.TrimSpace(status), "\n")).To(Equal([]string{
		"REMOTE  app@0.1.0    platform@v1.0.0",
		"edge-1  ready 0.1.0  ready v1.0.0",
		"edge-2  ready 0.1.0  ready v1.0.0",
		"edge-3  ready 0.1.0  ready v1.0.0",
	}))
	for _, name := range demo.Names {
		g.Expect(widget(t, fleet.Downstream[name])).To(Equal("small"), "the app's Widget runs on %s", name)
	}

	// A new app version, rolled out one cluster at a time.
	chart := filepath.Join(t.TempDir(), "widget")
	g.Expect(os.CopyFS(chart, os.DirFS(testenv.ChartDir("widget")))).To(Succeed())
	chartYAML, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(chart, "Chart.yaml"), bytes.Replace(chartYAML, []byte("version: 0.1.0"), []byte("version: 0.2.0"), 1), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(chart, "values.yaml"), []byte("size: large\n"), 0o644)).To(Succeed())
	repo := testenv.NewChartRepo(t, chart)
	app := &fleeetv1.Module{}
	c := fleet.Management.Client
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: "app"}, app)).To(Succeed())
	app.Spec.Sync.Source.Helm.URL, app.Spec.Sync.Source.Helm.Version = repo.URL, "0.2.0"
	g.Expect(c.Update(ctx, app)).To(Succeed())

	// Every change of every plan is seen: a cluster is moving while its plan
	// holds 0.2.0 and does not report it Ready yet.
	moving, maxMoving := map[string]bool{}, 0
	done := map[string]bool{}
	testenv.WatchUntil(t, fleet.Management, &fleeetv1.ProxyAssemblageList{}, demo.Tenant, 5*time.Minute, "app 0.2.0 Ready everywhere", func(ev watch.Event) bool {
		pa, ok := ev.Object.(*fleeetv1.ProxyAssemblage)
		if !ok {
			return false
		}
		held := compile.Find(pa.Spec.Assemblage.Syncs, "app")
		updated := held != nil && held.Source.Helm.Version == "0.2.0"
		done[pa.Name] = updated && readyAtCurrentPlan(pa, "app")
		moving[pa.Name] = updated && !done[pa.Name]
		now := 0
		for _, m := range moving {
			if m {
				now++
			}
		}
		maxMoving = max(maxMoving, now)
		finished := 0
		for _, d := range done {
			if d {
				finished++
			}
		}
		return finished == len(demo.Names)
	})
	g.Expect(maxMoving).To(Equal(1), "at most one cluster was moving at any moment, and one was")
	for _, name := range demo.Names {
		g.Eventually(func() string { return widget(t, fleet.Downstream[name]) }, time.Minute, time.Second).Should(Equal("large"))
	}
	out, err := fleet.Status(ctx, "why", "app", "--remote", "edge-2")
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
	time.Sleep(time.Until(stopped.Add(time.Minute)))
	for _, name := range demo.Names {
		g.Expect(widget(t, fleet.Downstream[name])).To(Equal("large"), "nothing deleted on %s", name)
		g.Expect(fleet.Downstream[name].Client.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: demo.Tenant}, &fleeetv1.Assemblage{})).To(Succeed())
	}
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
	credential := &corev1.Secret{}
	g.Expect(edge3.Client.Get(ctx, client.ObjectKey{Namespace: demo.AgentNamespace, Name: demo.Tenant + "-credential"}, credential)).To(Succeed())
	out, err = fleet.Status(ctx, "revoke", "edge-3")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("remote/edge-3 revoked: identity fleeet-remote-edge-3 deleted\n"))
	g.Eventually(func(g Gomega) {
		g.Expect(upstreamCondition(g, edge3, fleeetv1.RegisteredCondition).Reason).To(Equal("Revoked"))
	}, 2*time.Minute, time.Second).Should(Succeed())
	g.Consistently(func() string { return widget(t, edge3) }, 10*time.Second, time.Second).Should(Equal("large"),
		"a revoked cluster keeps running what it ran")
	cfg := rest.AnonymousClientConfig(fleet.Management.Config)
	cfg.BearerToken = string(credential.Data[enrol.TokenKey])
	revoked, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	err = revoked.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: "edge-3"}, &fleeetv1.ProxyAssemblage{})
	g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "the revoked cluster's credential no longer authenticates: %v", err)
	status, err = fleet.Status(ctx, "status")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Split(strings.TrimSpace(status), "\n")).To(Equal([]string{
		"REMOTE  app@0.2.0    platform@v1.0.0",
		"edge-1  ready 0.2.0  ready v1.0.0",
		"edge-2  ready 0.2.0  ready v1.0.0",
	}))
}

// upstreamCondition returns one condition of a cluster's Upstream.
func upstreamCondition(g Gomega, c *testenv.Cluster, typ string) *metav1.Condition {
	up := &fleeetv1.Upstream{}
	g.Expect(c.Client.Get(context.Background(), client.ObjectKey{Namespace: demo.AgentNamespace, Name: demo.Tenant}, up)).To(Succeed())
	cond := apimeta.FindStatusCondition(up.Status.Conditions, typ)
	g.Expect(cond).NotTo(BeNil(), "Upstream condition %s", typ)
	return cond
}

// readyAtCurrentPlan reports whether a plan's status, for the plan's
// current generation, says the sync is Ready.
func readyAtCurrentPlan(pa *fleeetv1.ProxyAssemblage, sync string) bool {
	if pa.Status.ObservedGeneration != pa.Generation {
		return false
	}
	for _, s := range pa.Status.Syncs {
		if s.Name == sync {
			return s.State == fleeetv1.SyncReady
		}
	}
	return false
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
