package charts_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	cli "github.com/fleeet-dev/fleeet/internal/fleetctl"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// TestChartsRunAsPodsFromTheirImages runs fleet-manager and fleet-agent the
// way a user does: the Pods their charts render, on real nodes, with the
// charts' probes and security context. The manager runs from the image
// `make images` builds under the chart's default name; the agent is enrolled
// as the README's quickstart says — `make release` into a registry,
// `fleetctl token create`, `helm install` of the released chart from oci://
// with the printed enrolment string — and its node pulls the image the
// release pinned. The downstream cluster starts without Flux,
// neither its CRDs nor its controllers: the agent chart brings both, and
// its Flux runs as Pods from images built from Flux's pinned modules under
// Flux's own image names. The agent Pod dials the management apiserver;
// the management apiserver calls the manager's webhook through its Service;
// the app is podinfo, whose Pods must be Ready for the Module to be, and a
// version of it whose Pods never become ready fails, holds its dependent
// and pauses the rollout until the next version repairs it.
func TestChartsRunAsPodsFromTheirImages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the images and runs real nodes")
	}
	g := testenv.Assertions(t)
	ctx := t.Context()
	certManagerCRDs, err := testenv.CertManagerCRDDirectory()
	g.Expect(err).NotTo(HaveOccurred())
	mgmt := testenv.StartCluster(t, "management", testenv.WithNodes(), testenv.WithoutFleeetCRDs(certManagerCRDs))
	testenv.StartCertManager(t, mgmt)
	down := testenv.StartCluster(t, "downstream", testenv.WithNodes(), testenv.WithoutCRDs())
	images := testenv.MakeImages(t)
	mgmt.StartNode(t, "management-1").ImportImage(t, images["fleet-manager"])
	edge := down.StartNode(t, "edge-1")
	for _, archive := range testenv.FluxImages(t, fluxControllers...) {
		edge.ImportImage(t, archive)
	}
	podinfo := testenv.GetPodinfo(t)
	edge.ImportImage(t, podinfo.Archive)

	// fleet-manager on the chart's default path: cert-manager issues the
	// webhook's certificate from a self-signed Issuer into the Secret the
	// Pod mounts, and its cainjector puts the CA into the webhook
	// configuration.
	testenv.ChartOf(t, "fleet-manager").Install(t, testenv.HelmFor(t, mgmt, managerNamespace), "fleet-manager", managerNamespace, map[string]any{
		"management": map[string]any{"url": mgmt.Config.Host, "caBundle": string(mgmt.Config.CAData)},
		"policies":   map[string]any{"frozen": frozenPolicy},
	})
	managerLog := podLog(t, mgmt, managerNamespace, "fleet-manager")
	waitAvailable(t, mgmt, managerNamespace, "fleet-manager", managerLog)
	expectCertManagerServesTheWebhook(t, mgmt)

	// The Pod runs as the chart says, judged from the host: the kernel's
	// view of the container's process, not the Pod spec.
	// The chart's default is highly available: two replicas, both Ready.
	managers := podUIDs(t, mgmt, managerNamespace, "fleet-manager")
	g.Expect(managers).To(HaveLen(2), "the chart's default replicas")
	for _, uid := range managers {
		proc := containerProcess(t, uid, "/fleet-manager")
		g.Expect(proc["Uid"]).To(HavePrefix("65532\t"), "runs as the non-root user")
		g.Expect(proc["CapEff"]).To(Equal("0000000000000000"), "holds no capability")
		g.Expect(proc["NoNewPrivs"]).To(Equal("1"), "cannot gain privileges")
		g.Expect(proc["root"]).To(HavePrefix("ro,"), "its root filesystem is read-only")
	}

	// The apiserver reaches the webhook through its Service, and the user
	// policy from the chart's values is in force there.
	g.Expect(mgmt.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: tenant, Labels: map[string]string{fleeetv1.TenantLabel: "true"},
		Annotations: map[string]string{"fleeet.dev/allow-insecure-http": "true"},
	}})).To(Succeed())
	g.Eventually(func() error {
		m := podinfoModule("https://git.example.com/app.git", "v1")
		m.Name, m.Labels = "frozen", map[string]string{"frozen": "true"}
		return mgmt.Client.Create(ctx, m)
	}, timeout, poll).Should(MatchError(ContainSubstring("metadata.labels.frozen: frozen objects are refused")), managerLog)

	// fleet-agent as a new user installs it. `make release` publishes the
	// charts and images to a registry; `fleetctl token create` prints the
	// helm command with the enrolment string; helm installs the released
	// chart from oci:// with it, and the node pulls the agent's image from
	// the registry by the digest the chart pins. The cluster is named after
	// its kube-system namespace.
	registry := testenv.NewPodReachableRegistry(t)
	edge.PullFrom(t, registry)
	chartRef := makeRelease(t, registry+"/fleeet", releaseVersion)
	fleetctl := fleetctlFor(t, mgmt)
	tokenFor := func(ns string) string {
		printed := fleetctl("-n", ns, "token", "create", "edge", "--chart", chartRef)
		token := regexp.MustCompile(`--set token=(\S+)`).FindStringSubmatch(printed)
		g.Expect(token).To(HaveLen(2), "fleetctl token create printed:\n%s", printed)
		return token[1]
	}
	// The platform team enrols the cluster into its own tenant too, whose
	// Modules upgrade the agent (docs/operating.md, "Upgrading fleet-agent and Flux").
	g.Expect(mgmt.Client.Create(ctx, platformNamespace())).To(Succeed())
	testenv.HelmCLI(t, down, "install", "fleet-agent", chartRef, "--version", releaseVersion, "--plain-http",
		"--namespace", agentNamespace, "--create-namespace", "--set", "token="+tokenFor(tenant),
		"--set", "tenants[0].token="+tokenFor(platform), "--set", "upgrade.tenant="+platform,
		// The chart brings Flux here, and upgrading it takes cluster-admin:
		// the explicit opt-in.
		"--set", "upgrade.clusterRole=cluster-admin",
		// The one thing this test's cluster lacks is cluster DNS, so
		// source-controller advertises its Service's address from the
		// environment instead of its DNS name.
		"--set", "flux.sourceController.storageAdvertisedAddress=$(SOURCE_CONTROLLER_SERVICE_HOST):$(SOURCE_CONTROLLER_SERVICE_PORT)")
	kubeSystem := &corev1.Namespace{}
	g.Expect(down.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, kubeSystem)).To(Succeed())
	cluster := "cluster-" + string(kubeSystem.UID)
	agentLog := podLog(t, down, agentNamespace, "fleet-agent")
	waitAvailable(t, down, agentNamespace, "fleet-agent", agentLog)

	// Flux came with the agent: each controller runs from the image of the
	// version its CRDs are labelled with, as the chart's security context
	// says.
	for fc, name := range fluxMainCRDs {
		waitAvailable(t, down, agentNamespace, string(fc), agentLog)
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Name: name}, crd)).To(Succeed())
		g.Expect(crd.Labels).To(HaveKeyWithValue("app.kubernetes.io/part-of", "flux"))
		g.Expect(crd.Labels).To(HaveKeyWithValue("app.kubernetes.io/component", string(fc)))
		d := &appsv1.Deployment{}
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: string(fc)}, d)).To(Succeed())
		g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("ghcr.io/fluxcd/" + string(fc) + ":" + crd.Labels["app.kubernetes.io/version"]))
	}
	proc := containerProcess(t, podUID(t, down, agentNamespace, string(testenv.SourceController)), "/source-controller")
	g.Expect(proc["Uid"]).To(HavePrefix("65532\t"), "runs as the non-root user")
	g.Expect(proc["CapEff"]).To(Equal("0000000000000000"), "holds no capability")
	g.Expect(proc["root"]).To(HavePrefix("ro,"), "its root filesystem is read-only")

	// podinfo through the fleet: Ready means its Pod is. source-controller
	// is a Pod, which reaches the host only at an address off loopback.
	git := testenv.NewPodReachableGitServer(t)
	repo, _ := git.Commit(t, "podinfo", podinfo.Kustomize(t, "deploy", nil), "v1")
	module := podinfoModule(repo, "v1")
	g.Expect(mgmt.Client.Create(ctx, module)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKeyFromObject(module), module)).To(Succeed())
		g.Expect(module.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1, Ready: 1}))
		d := &appsv1.Deployment{}
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "podinfo"}, d)).To(Succeed())
		g.Expect(d.Status.ReadyReplicas).To(BeNumerically(">=", 1))
	}, 3*timeout, poll).Should(Succeed(), func() string {
		pa := &fleeetv1.ProxyAssemblage{}
		_ = mgmt.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: cluster}, pa)
		return fmt.Sprintf("plan status: %+v\nmanager:\n%s\nagent:\n%s", pa.Status, managerLog(), agentLog())
	})
	// fleetctl status shows the cluster connected, running the released
	// agent, and podinfo ready on it.
	view := cli.StatusView{}
	g.Expect(json.Unmarshal([]byte(fleetctl("-n", tenant, "status", "-o", "json")), &view)).To(Succeed())
	g.Expect(view.Remotes).To(HaveLen(1))
	g.Expect(view.Remotes[0].Name).To(Equal(cluster))
	g.Expect(view.Remotes[0].Connected).To(BeTrue())
	g.Expect(view.Remotes[0].AgentVersion).To(Equal(releaseVersion))
	g.Expect(view.Remotes[0].Cells).To(HaveKeyWithValue("podinfo", HaveField("State", fleetview.StateReady)))
	agent := &appsv1.Deployment{}
	g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "fleet-agent"}, agent)).To(Succeed())
	g.Expect(agent.Spec.Template.Spec.Containers[0].Image).To(MatchRegexp(`^%s/fleeet/fleet-agent:%s@sha256:[0-9a-f]{64}$`,
		regexp.QuoteMeta(registry), regexp.QuoteMeta(releaseVersion)), "the released chart pins the pushed image")
	explain := func() string {
		pa := &fleeetv1.ProxyAssemblage{}
		_ = mgmt.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: cluster}, pa)
		m := &fleeetv1.Module{}
		_ = mgmt.Client.Get(ctx, client.ObjectKeyFromObject(module), m)
		return fmt.Sprintf("plan status: %+v\nmodule status: %+v", pa.Status, m.Status)
	}

	// v2's pods never pass their readiness probe. Its sync fails Flux's
	// health check with the pod's reason while v1's pods go on serving, a
	// Module depending on it waits, and the rollout pauses.
	git.Commit(t, "podinfo", podinfo.Kustomize(t, "deploy", func(name string, content []byte) []byte {
		if name != "deployment.yaml" {
			return content
		}
		return bytes.Replace(content, []byte("localhost:9898/readyz"), []byte("localhost:9898/never-ready"), 1)
	}), "v2")
	git.Commit(t, "podinfo", map[string]string{"frontend/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: frontend}\ndata: {backend: podinfo}\n"}, "v2-frontend")
	g.Expect(testenv.Change(ctx, mgmt.Client, module, func(m *fleeetv1.Module) {
		m.Spec.Sync.Source.Git.Tag = "v2"
		m.Spec.Sync.Package.Kustomize.Timeout = &metav1.Duration{Duration: 30 * time.Second}
		m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy}
	})).To(Succeed())
	// reported is the cluster's report on one sync of its current plan.
	reported := func(g Gomega, sync string) *fleeetv1.SyncStatus {
		pa := &fleeetv1.ProxyAssemblage{}
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: cluster}, pa)).To(Succeed())
		st := pa.ReportedSync(sync)
		g.Expect(st).NotTo(BeNil(), "no report on %s for the current plan", sync)
		return st
	}
	g.Eventually(func(g Gomega) {
		backend := reported(g, module.Name)
		g.Expect(backend.State).To(Equal(fleeetv1.SyncFailed))
		g.Expect(backend.Message).To(ContainSubstring("health check failed"))
		g.Expect(backend.Health).NotTo(BeNil())
		g.Expect(backend.Health.Reason).To(Equal("ReadinessProbeFailing"))
		g.Expect(backend.Health.Message).To(HavePrefix("Deployment podinfo: pod podinfo-"))
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKeyFromObject(module), module)).To(Succeed())
		paused := apimeta.FindStatusCondition(module.Status.Conditions, fleeetv1.RolloutPausedCondition)
		g.Expect(paused).NotTo(BeNil())
		g.Expect(paused.Message).To(ContainSubstring("workloads: "))
		g.Expect(paused.Message).To(ContainSubstring("ReadinessProbeFailing"))
	}, 3*timeout, poll).Should(Succeed(), explain)

	// A Module that depends on it now waits.
	frontend := podinfoModule(repo, "v2-frontend")
	frontend.Name = "frontend"
	frontend.Spec.Sync.Package.Kustomize.Path = "./frontend"
	frontend.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Name: module.Name}}
	g.Expect(mgmt.Client.Create(ctx, frontend)).To(Succeed())
	g.Eventually(func(g Gomega) {
		dependent := reported(g, frontend.Name)
		g.Expect(dependent.State).To(Equal(fleeetv1.SyncBlocked))
		g.Expect(dependent.Message).To(ContainSubstring("podinfo is Failed"))
	}, 3*timeout, poll).Should(Succeed(), explain)
	g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "frontend"}, &corev1.ConfigMap{})).NotTo(Succeed(),
		"the dependent is not applied while what it depends on is not running")

	// v3 repairs it: the rollout resumes and the dependent follows, with
	// nobody asking Flux to retry.
	git.Commit(t, "podinfo", podinfo.Kustomize(t, "deploy", nil), "v3")
	g.Expect(testenv.Change(ctx, mgmt.Client, module, func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v3" })).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKeyFromObject(module), module)).To(Succeed())
		g.Expect(module.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1, Ready: 1}))
		g.Expect(apimeta.FindStatusCondition(module.Status.Conditions, fleeetv1.RolloutPausedCondition)).To(BeNil())
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "frontend"}, &corev1.ConfigMap{})).To(Succeed())
		d := &appsv1.Deployment{}
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "podinfo"}, d)).To(Succeed())
		g.Expect(d.Status.UpdatedReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(d.Status.ReadyReplicas).To(Equal(*d.Spec.Replicas))
	}, 3*timeout, poll).Should(Succeed(), explain)
	remote := &fleeetv1.Remote{}
	g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: cluster}, remote)).To(Succeed())
	g.Expect(remote.Annotations).NotTo(HaveKey(fleeetv1.RetryAnnotation), "no fleetctl retry was needed")

	expectAFleetManagedAgentUpgrade(t, mgmt, down, registry, cluster, agentLog)
}

// releaseVersion is the version the test releases the charts and images at.
const releaseVersion = "0.0.0-enrol"

// makeRelease runs `make release`'s command into the registry path at
// version, over plain HTTP, and returns the agent chart's oci:// reference.
func makeRelease(t *testing.T, registry, version string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "run", "./hack/release", "--registry", registry, "--version", version,
		"--plain-http", "--out", t.TempDir())
	cmd.Dir = testenv.RepoRoot
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_CACHE_HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	return "oci://" + registry + "/charts/fleet-agent"
}

// fleetctlFor builds fleetctl and returns a function that runs it against
// c and returns what it printed.
func fleetctlFor(t *testing.T, c *testenv.Cluster) func(args ...string) string {
	t.Helper()
	bin := testenv.BuildCommand(t, "fleetctl", testenv.TestVersion)
	return func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("fleetctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

// fluxControllers are the Flux controllers the agent chart installs.
var fluxControllers = []testenv.FluxController{testenv.SourceController, testenv.KustomizeController, testenv.HelmController}

// fluxMainCRDs is, for each controller, the CRD whose owner decides whether
// the agent chart runs it.
var fluxMainCRDs = map[testenv.FluxController]string{
	testenv.SourceController:    "gitrepositories.source.toolkit.fluxcd.io",
	testenv.KustomizeController: "kustomizations.kustomize.toolkit.fluxcd.io",
	testenv.HelmController:      "helmreleases.helm.toolkit.fluxcd.io",
}

func podinfoModule(url, tag string) *fleeetv1.Module {
	return &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "podinfo"},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: &metav1.LabelSelector{},
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: url, Tag: tag}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy", TargetNamespace: tenant}},
			},
		}},
	}
}

// waitAvailable waits until the release's Deployment has every replica
// Ready: its probes pass.
func waitAvailable(t *testing.T, c *testenv.Cluster, ns, name string, logs func() string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		d := &appsv1.Deployment{}
		g.Expect(c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, d)).To(Succeed())
		g.Expect(d.Status.ReadyReplicas).To(Equal(*d.Spec.Replicas))
	}, 3*timeout, poll).Should(Succeed(), logs)
}

// podLog returns a function that fetches the logs of the release's Pods
// through the apiserver, for failure messages.
func podLog(t *testing.T, c *testenv.Cluster, ns, release string) func() string {
	return func() string {
		cs, err := kubernetes.NewForConfig(c.Config)
		if err != nil {
			return err.Error()
		}
		pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		if err != nil {
			return err.Error()
		}
		var b strings.Builder
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s: %s %v\n", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			tail := int64(40)
			logs, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(t.Context())
			if err != nil {
				fmt.Fprintf(&b, "  logs: %v\n", err)
			}
			b.Write(logs)
		}
		return b.String()
	}
}

// podUID returns the UID of the one Pod of a Deployment.
func podUID(t *testing.T, c *testenv.Cluster, ns, deployment string) string {
	t.Helper()
	uids := podUIDs(t, c, ns, deployment)
	NewWithT(t).Expect(uids).To(HaveLen(1), "pods of Deployment %s", deployment)
	return uids[0]
}

// podUIDs returns the UIDs of a Deployment's Pods, failing unless there
// are as many as it wants.
func podUIDs(t *testing.T, c *testenv.Cluster, ns, deployment string) []string {
	t.Helper()
	g := NewWithT(t)
	d := &appsv1.Deployment{}
	g.Expect(c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: deployment}, d)).To(Succeed())
	pods := &corev1.PodList{}
	g.Expect(c.Client.List(t.Context(), pods, client.InNamespace(ns), client.MatchingLabels(d.Spec.Selector.MatchLabels))).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(int(*d.Spec.Replicas)), "pods of Deployment %s", deployment)
	var uids []string
	for _, p := range pods.Items {
		uids = append(uids, string(p.UID))
	}
	return uids
}

// containerProcess finds the one process on this host whose command is
// entrypoint in a container of the Pod with that UID (other tests on this
// host may run the same image), and returns the fields of its /proc status,
// plus "root": the mount options of its root filesystem.
func containerProcess(t *testing.T, podUID, entrypoint string) map[string]string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, dir := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !bytes.Equal(bytes.SplitN(cmdline, []byte{0}, 2)[0], []byte(entrypoint)) {
			continue
		}
		// kubelet's cgroupfs driver names each Pod's cgroup pod<UID>.
		cgroup, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err == nil && bytes.Contains(cgroup, []byte("/pod"+podUID+"/")) {
			found = append(found, dir)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d processes run %s, want 1", len(found), entrypoint)
	}
	fields := map[string]string{}
	status, err := os.ReadFile(filepath.Join(found[0], "status"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	mounts, err := os.Open(filepath.Join(found[0], "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	defer mounts.Close()
	// mountinfo: ID parent major:minor root mountpoint options ...
	for s := bufio.NewScanner(mounts); s.Scan(); {
		f := strings.Fields(s.Text())
		if len(f) > 5 && f[4] == "/" {
			fields["root"] = f[5]
		}
	}
	return fields
}
