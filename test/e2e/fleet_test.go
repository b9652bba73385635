package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/demo"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// TestTheDemoFleetRollsOutAndRevokes runs `make demo`'s fleet (podinfo on
// three clusters with real nodes), rolls out a backend version whose pods
// never get ready and then its repair under maxUnavailable=1, then versions
// through three stages with an approval, an automatic rollback and an
// undo, stops the management apiserver for a minute, and revokes one
// cluster.
func TestTheDemoFleetRollsOutAndRevokes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three clusters with real nodes")
	}
	g := testenv.Assertions(t)
	ctx := t.Context()
	var progress bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("what the demo fleet did:\n%s", progress.String())
		}
	})
	fleet := demo.Start(t, &progress)
	if err := fleet.WaitConverged(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	frontend := fleet.FrontendChartVersion
	g.Consistently(func(g Gomega) [][]string { return statusCells(ctx, g, fleet) }, 5*time.Second, time.Second).Should(Equal([][]string{
		{"REMOTE", "backend@v1.0.0", "frontend@" + frontend},
		{"edge-1", "ready v1.0.0 1/1 pods", "ready " + frontend + " 1/1 pods"},
		{"edge-2", "ready v1.0.0 1/1 pods", "ready " + frontend + " 1/1 pods"},
		{"edge-3", "ready v1.0.0 1/1 pods", "ready " + frontend + " 1/1 pods"},
	}), "a converged fleet stays converged, every pod Ready")
	// The manager's metrics endpoint shows the same fleet.
	g.Eventually(func(g Gomega) string { return testenv.Metrics(g, fleet.ManagerMetrics, fleet.ManagerMetricsToken) }, time.Minute, time.Second).Should(And(
		ContainSubstring(`fleeet_module_rollout_state{module="backend",namespace="team-a",state="ready"} 1`),
		ContainSubstring(`fleeet_module_remotes{module="frontend",namespace="team-a",state="ready"} 3`),
		ContainSubstring(`fleeet_remote_connected{namespace="team-a",remote="edge-1"} 1`),
		MatchRegexp(`fleeet_plan_write_duration_seconds_count [1-9]`),
		MatchRegexp(`fleeet_rollout_duration_seconds_count [1-9]`)))
	// And each agent's metrics endpoint, the cluster's own syncs.
	for _, name := range demo.Names {
		g.Eventually(func(g Gomega) string {
			return testenv.Metrics(g, fleet.AgentMetrics[name], fleet.AgentMetricsTokens[name])
		}, time.Minute, time.Second).Should(And(
			MatchRegexp(`fleeet_agent_syncs\{[^}]*state="Ready"\} 2\n`),
			MatchRegexp(`fleeet_agent_syncs\{[^}]*state="Failed"\} 0\n`),
			MatchRegexp(`fleeet_agent_apply_duration_seconds_count [1-9]`)), name)
	}
	for _, name := range demo.Names {
		g.Eventually(func() (string, error) { return fleet.FrontendMessage(ctx, name) }, time.Minute, time.Second).
			Should(Equal(demo.WantMessage(name)), "each cluster's frontend Pod answers with the values bound from its Remote, or its region's override")
	}
	out, err := fleet.Fleetctl(ctx, "why", demo.Frontend, "--remote", "edge-3")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring("  overrides:    us\n"), "the cell names the override that set edge-3's message")

	// Backend v1.1.0's pods never pass their readiness probe, rolled out one
	// cluster at a time: the first cluster reports it Failed with the pods'
	// reason while v1.0.0's pods go on serving, its frontend (already running
	// its own desired spec) stays ready, and the rollout pauses there.
	fleet.CommitBackend(t, "v1.1.0", func(name string, content []byte) []byte {
		if name != "deployment.yaml" {
			return content
		}
		return bytes.Replace(content, []byte("localhost:9898/readyz"), []byte("localhost:9898/never-ready"), 1)
	})
	setBackend(t, fleet, "v1.1.0", 30*time.Second)
	broken := &rollout{syncName: demo.Backend, version: "v1.1.0", contents: &fleettest.Contents{Reader: fleet.Management.Client}}
	testenv.WatchUntil(t, fleet.Management, &fleeetv1.ProxyAssemblageList{}, demo.Tenant, 5*time.Minute, "backend v1.1.0 failed on a cluster", func(ev watch.Event) bool {
		return broken.see(ev) && broken.count(fleeetv1.SyncFailed) == 1
	})
	first := broken.in(fleeetv1.SyncFailed)
	c := fleet.Management.Client
	g.Eventually(func(g Gomega) {
		m := &fleeetv1.Module{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: demo.Backend}, m)).To(Succeed())
		paused := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)
		g.Expect(paused).NotTo(BeNil())
		g.Expect(paused.Message).To(And(HavePrefix("Remote "+first+" failed on v1.1.0: "), ContainSubstring("ReadinessProbeFailing")))
	}, time.Minute, time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		for _, name := range demo.Names {
			if name == first {
				continue
			}
			pa := &fleeetv1.ProxyAssemblage{}
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: name}, pa)).To(Succeed())
			g.Expect(compile.Find(broken.contents.Syncs(pa), demo.Backend).Source.Git.Tag).To(Equal(demo.BackendVersion), "%s waits while the rollout is paused", name)
		}
	}, 10*time.Second, time.Second).Should(Succeed())
	out, err = fleet.Fleetctl(ctx, "why", demo.Backend, "--remote", first)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(And(ContainSubstring("Module team-a/backend at v1.1.0 on Remote "+first+": failed"), ContainSubstring("ReadinessProbeFailing")))
	out, err = fleet.Fleetctl(ctx, "why", demo.Frontend, "--remote", first)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("Module team-a/frontend at "+frontend+" on Remote "+first+": ready"), "the running frontend is left as it is")
	for _, name := range demo.Names {
		if name != first {
			out, err = fleet.Fleetctl(ctx, "why", demo.Backend, "--remote", name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(ContainSubstring("rolling update paused by Remote " + first))
		}
	}
	g.Expect(fleet.FrontendMessage(ctx, first)).To(Equal(demo.WantMessage(first)), "what ran before keeps serving")
	g.Expect(readyReplicas(t, fleet.Downstream[first], "podinfo")).To(BeNumerically(">=", 1), "v1.0.0's backend pods keep serving")

	// A retry asked for from the management cluster reaches Flux on that
	// cluster (the version is still broken, so it fails again).
	out, err = fleet.Fleetctl(ctx, "retry", first)
	g.Expect(err).NotTo(HaveOccurred(), out)
	token, ok := strings.CutPrefix(strings.TrimSpace(out), "remote/"+first+": retry requested at ")
	g.Expect(ok).To(BeTrue(), out)
	g.Eventually(func(g Gomega) {
		ks := &kustomizev1.Kustomization{}
		g.Expect(fleet.Downstream[first].Client.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: flux.ObjectName(demo.Tenant, demo.Backend)}, ks)).To(Succeed())
		g.Expect(ks.Annotations).To(HaveKeyWithValue(meta.ReconcileRequestAnnotation, token))
		g.Expect(ks.Status.LastHandledReconcileAt).To(Equal(token), "Flux handled the request")
	}, time.Minute, time.Second).Should(Succeed())

	// v1.2.0 repairs it: the rollout goes on one cluster at a time, with
	// nobody asking Flux to retry.
	fleet.CommitBackend(t, "v1.2.0", nil)
	setBackend(t, fleet, "v1.2.0", 0)
	repaired := &rollout{syncName: demo.Backend, version: "v1.2.0", contents: &fleettest.Contents{Reader: fleet.Management.Client}}
	testenv.WatchUntil(t, fleet.Management, &fleeetv1.ProxyAssemblageList{}, demo.Tenant, 10*time.Minute, "backend v1.2.0 Ready everywhere", func(ev watch.Event) bool {
		return repaired.see(ev) && repaired.count(fleeetv1.SyncReady) == len(demo.Names)
	})
	g.Expect(broken.maxMoving).To(Equal(1), "one cluster at most moved to v1.1.0, and one did")
	g.Expect(repaired.maxMoving).To(Equal(1), "one cluster at most was moving to v1.2.0 at any moment, and one was")
	if err := fleet.WaitConverged(ctx, 5*time.Minute); err != nil {
		t.Fatalf("after the repair: %v", err)
	}
	out, err = fleet.Fleetctl(ctx, "why", demo.Backend, "--remote", first)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(And(ContainSubstring("Module team-a/backend at v1.2.0 on Remote "+first+": ready"), ContainSubstring("plan:         holds the current version v1.2.0"),
		ContainSubstring("rollout:      rolling update: this Remote holds the current version")))

	stagedRollout(t, fleet)

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
			down := fleet.Downstream[name]
			g.Expect(readyReplicas(t, down, "podinfo")).To(BeNumerically(">=", 1), "the backend runs on %s", name)
			g.Expect(readyReplicas(t, down, demo.FrontendDeployment)).To(BeNumerically(">=", 1), "the frontend runs on %s", name)
			g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: demo.Tenant}, &fleeetv1.Assemblage{})).To(Succeed())
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

	// make soak's soak, short: faults land at random while the backend is
	// changed, and the fleet ends where it was.
	runSoak(t, fleet, soakConfig{duration: 2 * time.Minute, every: 20 * time.Second, seed: 1})

	edge3 := fleet.Downstream["edge-3"]
	driftIsSeenAndCorrected(t, fleet, edge3)
	sopsSecretReachesAPod(t, fleet, edge3)

	// Revoking edge-3: its Remote and identity go, its workloads stay, its
	// credential stops working.
	stored := &corev1.Secret{}
	g.Expect(edge3.Client.Get(ctx, client.ObjectKey{Namespace: demo.AgentNamespace, Name: demo.Tenant + "-credential"}, stored)).To(Succeed())
	out, err = fleet.Fleetctl(ctx, "revoke", "edge-3")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("remote/edge-3 revoked: identity fleeet-remote-edge-3 deleted\n"))
	g.Eventually(func(g Gomega) {
		g.Expect(upstreamCondition(g, edge3, fleeetv1.RegisteredCondition).Reason).To(Equal("Revoked"))
	}, 2*time.Minute, time.Second).Should(Succeed())
	g.Consistently(func() (string, error) { return fleet.FrontendMessage(ctx, "edge-3") }, 10*time.Second, time.Second).
		Should(Equal(demo.WantMessage("edge-3")), "a revoked cluster keeps running what it ran")
	cfg := rest.AnonymousClientConfig(fleet.Management.Config)
	cfg.BearerToken = string(stored.Data[credential.TokenKey])
	revoked, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	err = revoked.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: "edge-3"}, &fleeetv1.ProxyAssemblage{})
	g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "the revoked cluster's credential no longer authenticates: %v", err)
	g.Eventually(func(g Gomega) [][]string { return statusCells(ctx, g, fleet) }, time.Minute, time.Second).Should(Equal([][]string{
		{"REMOTE", "backend@v1.4.0", "frontend@" + frontend},
		{"edge-1", "ready v1.4.0 1/1 pods", "ready " + frontend + " 1/1 pods"},
		{"edge-2", "ready v1.4.0 1/1 pods", "ready " + frontend + " 1/1 pods"},
	}))
}

// afterOutage bounds how long the manager takes to act on a change made
// just after the management apiserver's outage: client-go's reflectors
// retry a lost watch with a backoff that grows to 30–60 s within a minute's
// outage, so each of the manager's informers sees the apiserver again up to
// a minute after its return, each at an instant of its own (`fleetctl
// status`, reading the apiserver, may show the fleet converged before).
const afterOutage = 2 * time.Minute

// driftIsSeenAndCorrected: someone scales edge-3's frontend Deployment
// behind Flux's back, as a kubectl edit would. helm-controller looks for
// drift when it reconciles the HelmRelease, every 10 minutes; the test
// asks for that reconcile at once, as `flux reconcile helmrelease` does.
// helm-controller scales the Deployment back, and the fleet sees it: the
// sync's status on the management cluster, the Module's summary and
// metric, fleetctl status and fleetctl why.
func driftIsSeenAndCorrected(t *testing.T, fleet *demo.Fleet, down *testenv.Cluster) {
	g := testenv.Assertions(t)
	ctx := t.Context()
	c := fleet.Management.Client
	deployment := client.ObjectKey{Namespace: demo.Tenant, Name: demo.FrontendDeployment}
	dep := &appsv1.Deployment{}
	g.Expect(down.Client.Get(ctx, deployment, dep)).To(Succeed())
	g.Expect(dep.Spec.Replicas).To(HaveValue(Equal(int32(1))))
	g.Expect(testenv.Change(ctx, down.Client, dep, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(2)) })).To(Succeed())
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: flux.ObjectName(demo.Tenant, demo.Frontend)}}
	g.Expect(testenv.Change(ctx, down.Client, hr, func(hr *helmv2.HelmRelease) {
		metav1.SetMetaDataAnnotation(&hr.ObjectMeta, meta.ReconcileRequestAnnotation, time.Now().UTC().Format(time.RFC3339Nano))
	})).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(down.Client.Get(ctx, deployment, dep)).To(Succeed())
		g.Expect(dep.Spec.Replicas).To(HaveValue(Equal(int32(1))))
	}, 2*time.Minute, time.Second).Should(Succeed(), "helm-controller scaled the Deployment back")
	object := "Deployment/" + demo.Tenant + "/" + demo.FrontendDeployment
	g.Eventually(func(g Gomega) {
		pa := &fleeetv1.ProxyAssemblage{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: "edge-3"}, pa)).To(Succeed())
		s := pa.ReportedSync(demo.Frontend)
		g.Expect(s).NotTo(BeNil())
		g.Expect(s.Drift).NotTo(BeNil())
		g.Expect(s.Drift.Detected).To(BeNumerically(">=", 1))
		g.Expect(s.Drift.Corrected).To(Equal(s.Drift.Detected), "every drift was put back")
		g.Expect(s.Drift.Drifted).To(BeFalse())
		g.Expect(s.Drift.Objects).To(Equal([]string{object}))
		m := &fleeetv1.Module{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: demo.Frontend}, m)).To(Succeed())
		g.Expect(m.Status.Summary.Drifted).To(Equal(int32(1)), "edge-3 alone drifted")
	}, afterOutage, time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) string { return testenv.Metrics(g, fleet.ManagerMetrics, fleet.ManagerMetricsToken) }, afterOutage, time.Second).
		Should(ContainSubstring(`fleeet_module_remotes{module="frontend",namespace="team-a",state="drifted"} 1`))
	g.Eventually(func(g Gomega) []string { return statusCells(ctx, g, fleet)[3] }, time.Minute, time.Second).
		Should(ConsistOf("edge-3", MatchRegexp(`^ready v\S+ 1/1 pods$`), MatchRegexp(`^ready \S+ 1/1 pods drift [1-9]×$`)))
	out, err := fleet.Fleetctl(ctx, "why", demo.Frontend, "--remote", "edge-3")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(MatchRegexp(`drift: +drift detected ([1-9])×, corrected ([1-9])× \(` + object + `\)`))
}

// sopsSecretReachesAPod: a Module selecting edge-3 (region us) applies
// from git a Secret encrypted with the sops CLI to a fresh age key, and a
// podinfo Deployment taking its environment from that Secret. The key is
// a Secret in the tenant's namespace on edge-3, made here as a Module's
// delivered Secret would be; kustomize-controller decrypts, and the running
// pod answers with the decrypted message. Removing the Module removes both.
func sopsSecretReachesAPod(t *testing.T, fleet *demo.Fleet, down *testenv.Cluster) {
	g := testenv.Assertions(t)
	ctx := t.Context()
	const name, message = "sealed", "decrypted on edge-3"
	key := testenv.NewSOPSKey(t)
	secret := key.Encrypt(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: "+name+"\nstringData:\n  PODINFO_UI_MESSAGE: "+message+"\n")
	g.Expect(secret).NotTo(ContainSubstring(message))

	// podinfo as the backend runs it, under another name, its environment
	// from the Secret.
	backend := &appsv1.Deployment{}
	g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: "podinfo"}, backend)).To(Succeed())
	labels := map[string]string{"app": name}
	pod := backend.Spec.Template.DeepCopy()
	pod.ObjectMeta = metav1.ObjectMeta{Labels: labels}
	pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
	manifest, err := yaml.Marshal(&appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: *pod},
	})
	g.Expect(err).NotTo(HaveOccurred())
	fleet.Git.Commit(t, name, map[string]string{
		"kustomization.yaml": "resources: [secret.yaml, deployment.yaml]\n",
		"secret.yaml":        secret,
		"deployment.yaml":    string(manifest),
	}, "v1.0.0")
	keySecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: "sops-age"}, Data: key.SecretData()}
	g.Expect(down.Client.Create(ctx, keySecret)).To(Succeed())

	c := fleet.Management.Client
	m := &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: name},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "us"}},
			Sync: fleeetv1.SyncSpec{
				Source: fleet.SSHSource(name, "v1.0.0"),
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{TargetNamespace: demo.Tenant,
					Decryption: &fleeetv1.KustomizeDecryption{SecretRef: fleeetv1.LocalObjectReference{Name: keySecret.Name}}}},
			},
		}},
	}
	g.Expect(c.Create(ctx, m)).To(Succeed())
	g.Eventually(func() (string, error) { return fleet.PodinfoMessage(ctx, "edge-3", name) }, 3*time.Minute, time.Second).
		Should(Equal(message), "the pod's environment holds the decrypted value")

	g.Expect(c.Delete(ctx, m)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(down.Client.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: name}, &corev1.Secret{}))
	}, 2*time.Minute, time.Second).Should(BeTrue(), "the decrypted Secret goes with the Module")
	g.Expect(down.Client.Delete(ctx, keySecret)).To(Succeed())
}

// setBackend moves the backend Module to a git tag, with a health-check
// timeout unless zero.
func setBackend(t *testing.T, fleet *demo.Fleet, tag string, timeout time.Duration) {
	g := NewWithT(t)
	c := fleet.Management.Client
	m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: demo.Backend}}
	g.Expect(testenv.Change(t.Context(), c, m, func(m *fleeetv1.Module) {
		m.Spec.Sync.Source.Git.Tag = tag
		if timeout != 0 {
			m.Spec.Sync.Package.Kustomize.Timeout = &metav1.Duration{Duration: timeout}
		}
	})).To(Succeed())
}

// readyReplicas is how many Pods of a Deployment in the tenant namespace
// are Ready, or -1 while the Deployment cannot be read.
func readyReplicas(t *testing.T, c *testenv.Cluster, name string) int32 {
	d := &appsv1.Deployment{}
	if err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: demo.Tenant, Name: name}, d); err != nil {
		t.Logf("Deployment %s on %s: %v", name, c.Name, err)
		return -1
	}
	return d.Status.ReadyReplicas
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
	// contents reads what plans hold whole.
	contents *fleettest.Contents
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
	if held := compile.Find(r.contents.Syncs(pa), r.syncName); held != nil && held.Source.Git != nil {
		r.versions[pa.Name] = held.Source.Git.Tag
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

// in is the first cluster (by name) holding the version in a state.
func (r *rollout) in(state fleeetv1.SyncState) string {
	for _, name := range demo.Names {
		if r.versions[name] == r.version && r.state[name] == state {
			return name
		}
	}
	return ""
}

// statusCells is `fleetctl status` split into words, line by line.
func statusCells(ctx context.Context, g Gomega, fleet *demo.Fleet) [][]string {
	out, err := fleet.Fleetctl(ctx, "status")
	g.Expect(err).NotTo(HaveOccurred())
	var cells [][]string
	for line := range strings.Lines(strings.TrimSpace(out)) {
		cells = append(cells, demo.Cells(line))
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
