package fleetctl_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/fleetctl"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleetviewtest"
	"github.com/fleeet-dev/fleeet/internal/version"
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(fleetviewtest.RunWithManager(m, &cluster))
}

// run runs the command line in-process against the test cluster.
func run(t testing.TB, ns string, args ...string) (string, error) {
	t.Helper()
	return runOn(t, cluster, ns, args...)
}

// statusView runs `fleetctl status -o json` in ns and decodes its output.
func statusView(t testing.TB, g Gomega, ns string) fleetctl.StatusView {
	t.Helper()
	out, err := run(t, ns, "status", "-o", "json")
	g.Expect(err).NotTo(HaveOccurred(), out)
	var view fleetctl.StatusView
	g.Expect(json.Unmarshal([]byte(out), &view)).To(Succeed(), out)
	return view
}

// runOn runs the command line in-process against c.
func runOn(t testing.TB, c *testenv.Cluster, ns string, args ...string) (string, error) {
	t.Helper()
	cmd := fleetctl.NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--kubeconfig", c.Kubeconfig, "--namespace", ns}, args...))
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

func TestStatusShowsTheFleetGrid(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.Fleet(t, cluster)
	g.Eventually(func(g Gomega) {
		view := statusView(t, g, ns)
		g.Expect(view.Modules).To(Equal(map[string]string{"app": "v1.0.0", "crds": "v1.0.0"}))
		cells := map[string]map[string]string{}
		for _, r := range view.Remotes {
			cells[r.Name] = map[string]string{}
			for m, c := range r.Cells {
				cells[r.Name][m] = c.State + " " + c.Version
			}
		}
		g.Expect(cells).To(Equal(map[string]map[string]string{
			"edge-1": {"app": "blocked v1.0.0", "crds": "ready v1.0.0"},
			"edge-2": {"app": "offline v1.0.0", "crds": "offline v1.0.0"},
			"lab":    {"app": "failed v1.0.0"},
		}))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())

	out, err := run(t, ns, "status")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Split(strings.TrimSpace(out), "\n")).To(Equal([]string{
		"REMOTE  app@v1.0.0                               crds@v1.0.0",
		"edge-1  blocked v1.0.0                           ready v1.0.0 2/2 pods",
		"edge-2  offline v1.0.0                           offline v1.0.0",
		"lab     failed v1.0.0 0/2 pods CrashLoopBackOff  -",
	}), "plain text when not a terminal")

	_, err = run(t, ns, "status", "-o", "xml")
	g.Expect(err).To(MatchError(ContainSubstring(`--output "xml": want yaml, json or wide`)))

	// -o wide adds the versions each Remote's agent reports, as the agent
	// applies them, what is wrong with a cluster's Flux, and whether the
	// agent is within the skew window of the manager (version.Version here:
	// edge-1 runs the same build, lab a release the manager cannot compare
	// itself with, edge-2 reported nothing).
	fluxCompatible := func(cs metav1.ConditionStatus, reason, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: fleeetv1.FluxCompatibleCondition, Status: cs, Reason: reason, Message: msg,
			LastTransitionTime: metav1.Now()}}
	}
	edge1 := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-1"}}
	g.Expect(status.Apply(t.Context(), cluster.Client, edge1, status.AgentManager, map[string]any{
		"agentVersion": version.Version, "kubernetesVersion": "v1.36.3", "flux": fleeetv1.FluxStatus{Version: "v2.7.3"},
		"conditions": fluxCompatible(metav1.ConditionTrue, fleeetv1.ReasonFluxServed, "Flux serves …"),
	})).To(Succeed())
	const incompatible = "CustomResourceDefinition helmreleases.helm.toolkit.fluxcd.io serves v2beta2, not v2 " +
		"(the agent writes HelmRelease helm.toolkit.fluxcd.io/v2; upgrade Flux's helm-controller)"
	lab := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lab"}}
	g.Expect(status.Apply(t.Context(), cluster.Client, lab, status.AgentManager, map[string]any{
		"agentVersion": "v1.4.2", "kubernetesVersion": "v1.35.0",
		"flux": fleeetv1.FluxStatus{Controllers: map[string]string{
			"source-controller": "v1.9.6", "kustomize-controller": "v1.9.5", "helm-controller": "v0.37.4"}},
		"conditions": fluxCompatible(metav1.ConditionFalse, fleeetv1.ReasonFluxIncompatible, incompatible),
	})).To(Succeed())
	g.Eventually(func(g Gomega) []string {
		out, err := run(t, ns, "status", "-o", "wide")
		g.Expect(err).NotTo(HaveOccurred())
		return strings.Split(strings.TrimSpace(out), "\n")
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Equal([]string{
		"REMOTE  AGENT   SKEW     KUBERNETES  FLUX                                                                                             app@v1.0.0                               crds@v1.0.0",
		"edge-1  dev     ok       v1.36.3     v2.7.3                                                                                           blocked v1.0.0                           ready v1.0.0 2/2 pods",
		"edge-2  -       unknown  -           -                                                                                                offline v1.0.0                           offline v1.0.0",
		"lab     v1.4.2  unknown  v1.35.0     helm-controller v0.37.4, kustomize-controller v1.9.5, source-controller v1.9.6 FluxIncompatible  failed v1.0.0 0/2 pods CrashLoopBackOff  -",
	}))
	view := statusView(t, g, ns)
	g.Expect(view.Remotes).To(ContainElement(And(HaveField("Name", "lab"),
		HaveField("Flux", HaveValue(HaveField("Controllers", HaveKeyWithValue("helm-controller", "v0.37.4")))),
		HaveField("FluxProblem", "FluxIncompatible: "+incompatible))))
	g.Expect(view.Remotes).To(ContainElement(And(HaveField("Name", "edge-1"),
		HaveField("Flux", HaveValue(HaveField("Version", "v2.7.3"))), HaveField("FluxProblem", ""),
		HaveField("AgentSkew", "ok"), HaveField("AgentProblem", ""))))
	// lab's SKEW reads unknown before its report is judged as after.
	g.Eventually(func(g Gomega) []fleetctl.RemoteView {
		return statusView(t, g, ns).Remotes
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(ContainElement(And(HaveField("Name", "lab"), HaveField("AgentSkew", "unknown"),
		HaveField("AgentProblem", "AgentVersionUnknown: agent v1.4.2 and manager "+version.Version+
			" differ and are not both release versions, so the skew is unknown"))))
}

func TestWhyExplainsOneCell(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.Fleet(t, cluster)
	g.Eventually(func(g Gomega) {
		out, err := run(t, ns, "why", "app", "--remote", "edge-1")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).To(ContainSubstring("Module " + ns + "/app at v1.0.0 on Remote edge-1: blocked"))
		g.Expect(out).To(ContainSubstring("selection:    selected: selector {} (every Remote) against labels [env=edge]"))
		g.Expect(out).To(ContainSubstring("rollout:      rolling update paused by Remote lab"))
		g.Expect(out).To(ContainSubstring("plan:         holds the current version v1.0.0"))
		g.Expect(out).To(ContainSubstring("cluster says: waiting for crds"))
		g.Expect(out).To(ContainSubstring("waits for:    crds — ready; workloads: 2/2 pods ready"))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())

	out, err := run(t, ns, "why", "app", "--remote", "lab")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("cluster says: kustomize build failed\n" +
		"  workloads:    0/2 pods ready: CrashLoopBackOff (Deployment web: pod web-7d9c-x4k2p: container app)\n"))

	out, err = run(t, ns, "why", "crds", "--remote", "lab")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("selection:    not selected: selector env=edge against labels [env=lab]"))
	g.Expect(out).To(ContainSubstring("plan:         does not hold this Module's sync"))

	out, err = run(t, ns, "why", "app", "--remote", "edge-2", "-o", "yaml")
	g.Expect(err).NotTo(HaveOccurred())
	var view fleetview.WhyView
	g.Expect(yaml.Unmarshal([]byte(out), &view)).To(Succeed())
	g.Expect(view.Cell.State).To(Equal("offline"))
	g.Expect(view.Connection).To(HavePrefix("Connected False (HeartbeatMissed: "))

	_, err = run(t, ns, "why", "app", "--remote", "nowhere")
	g.Expect(err).To(MatchError(`no Remote "nowhere" in namespace ` + ns + " (--remote)"))
	_, err = run(t, ns, "why", "nothing", "--remote", "lab")
	g.Expect(err).To(MatchError("no Module nothing in namespace " + ns))
}

// The cell of a Module with overrides says which of them pick the Remote
// and shows the package the Remote's plan holds with them applied.
func TestWhyShowsTheOverridesAndTheResolvedPackage(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.Fleet(t, cluster)
	crds := &fleeetv1.Module{}
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "crds"}, crds)).To(Succeed())
	// A merge patch: the manager may write the Module's status meanwhile.
	unchanged := crds.DeepCopy()
	crds.Spec.Overrides = []fleeetv1.Override{{Name: "big", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "edge"}},
		Kustomize: &fleeetv1.KustomizeOverride{Images: []fleeetv1.KustomizeImage{{Name: "web", NewTag: "2.0"}}}}}
	g.Expect(cluster.Client.Patch(t.Context(), crds, client.MergeFrom(unchanged))).To(Succeed())
	g.Eventually(func(g Gomega) {
		out, err := run(t, ns, "why", "crds", "--remote", "edge-1")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).To(ContainSubstring("  overrides:    big\n"))
		g.Expect(out).To(ContainSubstring("  resolved package, as the plan holds it:\n    kustomize:\n      images:\n      - name: web\n        newTag: \"2.0\"\n"))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	out, err := run(t, ns, "why", "app", "--remote", "edge-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).NotTo(ContainSubstring("overrides:"), "a Module without overrides says nothing of them")
}

func TestWhyShowsTheLastPolicyDenial(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := fleetviewtest.Fleet(t, cluster)
	out, err := run(t, ns, "why", "crds", "--remote", "edge-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("policy:       none recorded"))

	// A user policy refuses plans that pull from one git server; a Module
	// moving there is held back on every Remote it selects, and says why.
	policy := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleeet-system", Name: "git-servers-" + ns, Labels: map[string]string{fleeetv1.PolicyLabel: "true"}},
		Data: map[string]string{"policy.rego": fmt.Sprintf(`package fleeet.git_servers_%s
deny contains msg if {
	input.request.namespace == %q
	input.request.kind.kind == "ProxyAssemblage"
	some s in input.object.spec.assemblage.syncs
	startswith(s.source.git.url, "https://untrusted.example.com/")
	msg := sprintf("spec.assemblage.syncs[%%s].source.git.url: %%s is not an approved git server", [s.name, s.source.git.url])
}`, strings.ReplaceAll(ns, "-", "_"), ns)},
	}
	g.Expect(cluster.Client.Create(ctx, policy)).To(Succeed())
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), policy) })
	// The manager loads policies asynchronously: wait until a plan pulling
	// from that server is refused (a dry run), then move the Module there.
	g.Eventually(func(g Gomega) error {
		pa := &fleeetv1.ProxyAssemblage{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-1"}, pa)).To(Succeed())
		compile.Find(pa.Spec.Assemblage.Syncs, "crds").Source.Git.URL = "https://untrusted.example.com/crds.git"
		return cluster.Client.Update(ctx, pa, client.DryRunAll)
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(MatchError(ContainSubstring("is not an approved git server")))
	crds := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "crds"}}
	g.Expect(testenv.Change(ctx, cluster.Client, crds, func(m *fleeetv1.Module) {
		m.Spec.Sync.Source.Git.URL, m.Spec.Sync.Source.Git.Tag = "https://untrusted.example.com/crds.git", "v1.1.0"
	})).To(Succeed())

	g.Eventually(func(g Gomega) {
		out, err := run(t, ns, "why", "crds", "--remote", "edge-1")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).To(MatchRegexp(`policy: +\S+ PolicyDenied: Remote edge-1: plan refused by admission policy: .*spec.assemblage.syncs\[crds\].source.git.url: https://untrusted.example.com/crds.git is not an approved git server`))
		g.Expect(out).To(ContainSubstring("plan:         holds v1.0.0, not the current version yet"))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	pa := &fleeetv1.ProxyAssemblage{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-1"}, pa)).To(Succeed())
	g.Expect(compile.Find(pa.Spec.Assemblage.Syncs, "crds").Source.Git.URL).To(Equal("https://git.example.com/crds.git"), "the refused plan keeps what it held")
	out, err = run(t, ns, "why", "app", "--remote", "edge-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("policy:       none recorded"), "app did not change")
}

func TestTokenCreatePrintsTheInstallCommand(t *testing.T) {
	g := NewWithT(t)
	ns := cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	out, err := run(t, ns, "token", "create", "edge", "--labels", "env=edge", "--free-label-keys", "region,zone", "--max", "2", "--ttl", "30m", "--cluster-name", "edge-7")
	g.Expect(err).NotTo(HaveOccurred(), out)
	tok := &fleeetv1.RegistrationToken{}
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "edge"}, tok)).To(Succeed())
	g.Expect(tok.Spec.MaxRegistrations).To(Equal(int32(2)))
	g.Expect(tok.Spec.TTL.Duration).To(Equal(30 * time.Minute))
	g.Expect(tok.Spec.RemoteLabels).To(Equal(map[string]string{"env": "edge"}))
	g.Expect(tok.Spec.FreeLabelKeys).To(Equal([]string{"region", "zone"}))
	secret := &corev1.Secret{}
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: tok.Status.SecretName}, secret)).To(Succeed())
	g.Expect(out).To(HavePrefix("helm install fleet-agent "+fleetviewtest.AgentChart+" \\\n  --namespace fleeet-system --create-namespace \\\n"),
		"the chart the fleet was released with, as the manager wrote it into the token's Secret")
	// One value enrols the cluster: the enrolment string the manager wrote
	// next to the values, carrying the URL, CA, namespace and token.
	enrolment := string(secret.Data[credential.EnrolmentKey])
	g.Expect(out).To(ContainSubstring("--set token=" + enrolment + " \\\n"))
	g.Expect(out).NotTo(ContainSubstring("management."), "the enrolment string carries the management values")
	g.Expect(out).To(HaveSuffix("--set clusterName=edge-7\n"))
	data, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(enrolment, credential.EnrolmentPrefix))
	g.Expect(err).NotTo(HaveOccurred())
	var carried credential.AgentValues
	g.Expect(json.Unmarshal(data, &carried)).To(Succeed())
	g.Expect(carried).To(Equal(credential.AgentValues{Token: string(secret.Data[credential.TokenKey]),
		Management: credential.Management{URL: cluster.Config.Host, Namespace: ns, CABundle: cluster.Config.CAData}}))

	file := filepath.Join(t.TempDir(), "values.yaml")
	out, err = run(t, ns, "token", "create", "lab", "--values-file", file, "--chart", "./charts/fleet-agent")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(HavePrefix("helm install fleet-agent ./charts/fleet-agent \\\n"), "--chart names another")
	g.Expect(out).To(ContainSubstring("-f " + file))
	g.Expect(out).NotTo(ContainSubstring("token="), "the token stays in the file")
	info, err := os.Stat(file)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	data, err = os.ReadFile(file)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(HavePrefix("token: " + credential.EnrolmentPrefix))
	g.Expect(out).NotTo(ContainSubstring("clusterName"), "unset, the chart names the cluster itself")

	_, err = run(t, ns, "token", "create", "edge")
	g.Expect(err).To(MatchError(ContainSubstring("already exists")))
}

func TestRevokeDeletesTheRemote(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.Fleet(t, cluster)
	out, err := run(t, ns, "revoke", "lab")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("remote/lab revoked: identity fleeet-remote-lab deleted\n"))
	err = cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "lab"}, &fleeetv1.Remote{})
	g.Expect(client.IgnoreNotFound(err)).To(Succeed())
	g.Expect(err).To(HaveOccurred())
	_, err = run(t, ns, "revoke", "lab")
	g.Expect(err).To(MatchError(ContainSubstring("not found")))
}

func TestRetryPutsANewTokenIntoThePlan(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.Fleet(t, cluster)
	token := func() string {
		out, err := run(t, ns, "retry", "edge-1")
		g.Expect(err).NotTo(HaveOccurred(), out)
		at, ok := strings.CutPrefix(strings.TrimSpace(out), "remote/edge-1: retry requested at ")
		g.Expect(ok).To(BeTrue(), out)
		return at
	}
	for range 2 {
		want := token()
		g.Eventually(func(g Gomega) {
			pa := &fleeetv1.ProxyAssemblage{}
			g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "edge-1"}, pa)).To(Succeed())
			g.Expect(pa.Spec.Assemblage.RetryRequestedAt).To(Equal(want))
			g.Expect(pa.Spec.Assemblage.Syncs).To(HaveLen(2), "the syncs stay as they were")
		}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	}
	_, err := run(t, ns, "retry", "nowhere")
	g.Expect(err).To(MatchError(ContainSubstring(`remotes.fleeet.dev "nowhere" not found`)))
}

func TestRolloutCommandsShowAndSteerARollout(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.Fleet(t, cluster)
	g.Eventually(func(g Gomega) {
		out, err := run(t, ns, "rollout", "status", "app")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).To(ContainSubstring("module/app: v1.0.0 (revision "))
		g.Expect(out).To(ContainSubstring("state:   False RemoteFailed: Remote lab failed on v1.0.0: kustomize build failed"))
		g.Expect(out).To(MatchRegexp(`\(rest\) \*\s+3\s+2\s+0\s+1\s+\n`), "one implicit stage: 3 Remotes, 2 updated, none ready, 1 offline")
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())

	out, err := run(t, ns, "rollout", "history", "app")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(out)).To(Equal("REVISION  VERSION  OUTCOME  TIME"), "nothing was Ready across the fleet yet")

	_, err = run(t, ns, "rollout", "undo", "app")
	g.Expect(err).To(MatchError("module app: no earlier version was Ready across the fleet; nothing to roll back to"))
	_, err = run(t, ns, "rollout", "approve", "app", "canary")
	g.Expect(err).To(MatchError(`module app has no stage "canary"`))
	_, err = run(t, ns, "rollout", "pause", "crds")
	g.Expect(err).To(MatchError("module crds rolls out AllAtOnce: only a RollingUpdate can be paused"))

	module := func(g Gomega) *fleeetv1.Module {
		m := &fleeetv1.Module{}
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app"}, m)).To(Succeed())
		return m
	}
	_, err = run(t, ns, "rollout", "pause", "app", "--reason", "freeze\nforged: line")
	g.Expect(err).To(MatchError("--reason: at most 106 printable ASCII characters (it goes into the annotation fleeet.dev/pause)"))
	_, err = run(t, ns, "rollout", "pause", "app", "--reason", strings.Repeat("x", 107))
	g.Expect(err).To(HaveOccurred())
	g.Expect(module(g).Annotations).NotTo(HaveKey(fleeetv1.PauseAnnotation), "a refused pause writes nothing")

	out, err = run(t, ns, "rollout", "pause", "app", "--reason", "change freeze")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(MatchRegexp(`^module/app paused \(fleeet.dev/pause: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: change freeze\)\n$`))
	g.Expect(module(g).Annotations[fleeetv1.PauseAnnotation]).To(HaveSuffix("Z: change freeze"))
	g.Expect(module(g).Spec.Rollout.Paused).To(BeFalse(), "pause writes no spec")
	out, err = run(t, ns, "rollout", "resume", "app")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("module/app resumed\n"))
	g.Expect(module(g).Annotations).NotTo(HaveKey(fleeetv1.PauseAnnotation))

	// A pause declared in the spec is not resume's to lift, and it says so.
	g.Expect(cluster.Client.Patch(t.Context(), module(g), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"rollout":{"paused":true}}}`)))).To(Succeed())
	out, err = run(t, ns, "rollout", "resume", "app")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("module/app: removed fleeet.dev/pause, but spec.rollout.paused still pauses it; set it to false where the spec is kept\n"))
	g.Expect(module(g).Spec.Rollout.Paused).To(BeTrue())
}

// specs maps every Module, Remote and ProxyAssemblage of a namespace to
// what a write of it would change: its generation (bumped by every spec
// change), labels and annotations. Not the resourceVersion: the manager
// keeps writing status meanwhile.
func specs(g Gomega, ns string) map[string]string {
	rvs := map[string]string{}
	for _, list := range []client.ObjectList{&fleeetv1.ModuleList{}, &fleeetv1.RemoteList{}, &fleeetv1.ProxyAssemblageList{}} {
		g.Expect(cluster.Client.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
		g.Expect(apimeta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			rvs[fmt.Sprintf("%T/%s", obj, obj.GetName())] = fmt.Sprint(obj.GetGeneration(), obj.GetLabels(), obj.GetAnnotations())
			return nil
		})).To(Succeed())
	}
	return rvs
}

// manifest writes a Module manifest for fleetctl diff -f: the stored
// Module, edited.
func manifest(t testing.TB, ns, name string, edit func(*fleeetv1.Module)) string {
	m := &fleeetv1.Module{}
	NewWithT(t).Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, m)).To(Succeed())
	m.TypeMeta = metav1.TypeMeta{APIVersion: fleeetv1.GroupVersion.String(), Kind: "Module"}
	m.ObjectMeta = metav1.ObjectMeta{Name: name, Labels: m.Labels}
	m.Status = fleeetv1.ModuleStatus{}
	edit(m)
	raw, err := yaml.Marshal(m)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	file := filepath.Join(t.TempDir(), name+".yaml")
	NewWithT(t).Expect(os.WriteFile(file, raw, 0o600)).To(Succeed())
	return file
}

// differs checks that fleetctl diff, printing out, ended with err saying it
// found differences (exit status 1): ExitCode(nil) is 1 too.
func differs(g Gomega, err error, out string) {
	g.ExpectWithOffset(1, err).To(HaveOccurred(), "no differences found:\n%s", out)
	g.ExpectWithOffset(1, fleetctl.ExitCode(err)).To(Equal(1), "%v\n%s", err, out)
}

func TestDiffPreviewsAChangeOnEveryPlanAndWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.Fleet(t, cluster)
	g.Eventually(func(g Gomega) {
		out, err := run(t, ns, "status", "-o", "json")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).To(ContainSubstring(`"blocked"`))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	g.Eventually(func(g Gomega) { // the manager has compiled every plan
		settled := specs(g, ns)
		time.Sleep(time.Second)
		g.Expect(specs(g, ns)).To(Equal(settled))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	before := specs(g, ns)

	// A version bump: both edge Remotes change crds, and app waits for it.
	out, err := run(t, ns, "diff", "-f", manifest(t, ns, "crds", func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v1.1.0" }))
	differs(g, err, out)
	g.Expect(out).To(Equal("update Module " + ns + "/crds\n  admitted (server-side dry run)\n" +
		"Remote edge-1:\n  ~ crds\n      source.git.tag: \"v1.0.0\" → \"v1.1.0\"\n  held: app (waits for crds)\n" +
		"Remote edge-2:\n  ~ crds\n      source.git.tag: \"v1.0.0\" → \"v1.1.0\"\n  held: app (waits for crds)\n"))

	// A selector change: lab comes to hold crds.
	out, err = run(t, ns, "diff", "-o", "json", "-f", manifest(t, ns, "crds", func(m *fleeetv1.Module) { m.Spec.Selector = &metav1.LabelSelector{} }))
	differs(g, err, out)
	var view fleetctl.DiffView
	g.Expect(json.Unmarshal([]byte(out), &view)).To(Succeed(), out)
	g.Expect(view.Selected).To(Equal([]string{"lab"}))
	g.Expect(view.Remotes).To(Equal([]fleetctl.RemoteDiff{{Remote: "lab", Added: []string{"crds v1.0.0"}, Held: []string{"app (waits for crds)"}}}))

	// A binding: each Remote's sync gets its own value.
	out, err = run(t, ns, "diff", "-f", manifest(t, ns, "crds", func(m *fleeetv1.Module) {
		m.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{{Name: "ENV",
			ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "Remote", FieldPath: "/metadata/labels/env"}}}
		m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"env": "$(ENV)"}
	}))
	differs(g, err, out)
	g.Expect(out).To(ContainSubstring("Remote edge-2:\n  ~ crds\n      package.kustomize.substitute.env: (none) → \"edge\"\n"))

	// Overrides: each Remote's resolved sync, and which overrides picked it.
	out, err = run(t, ns, "diff", "-f", manifest(t, ns, "crds", func(m *fleeetv1.Module) {
		m.Spec.Overrides = []fleeetv1.Override{
			{Name: "edge", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "edge"}},
				Kustomize: &fleeetv1.KustomizeOverride{Substitute: map[string]string{"size": "l"}}},
			{Name: "nowhere", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "nowhere"}},
				Kustomize: &fleeetv1.KustomizeOverride{Substitute: map[string]string{"size": "xl"}}},
		}
	}))
	differs(g, err, out)
	g.Expect(out).To(ContainSubstring("Remote edge-1:\n  ~ crds\n      package.kustomize.substitute.size: (none) → \"l\"\n  overrides crds: edge\n"))

	// A change admission refuses: nothing would change.
	out, err = run(t, ns, "diff", "-f", manifest(t, ns, "crds", func(m *fleeetv1.Module) {
		m.Spec.Sync.Source.Git.URL = "http://git.example.com/crds.git"
	}))
	differs(g, err, out)
	g.Expect(out).To(And(ContainSubstring("refused by the apiserver: "), ContainSubstring(`scheme "http" is not allowed`),
		HaveSuffix("nothing would change\n")))

	// A deletion, and a Remote's new labels.
	out, err = run(t, ns, "diff", "--delete", "crds")
	differs(g, err, out)
	g.Expect(out).To(ContainSubstring("Remote edge-1:\n  - crds\n"))
	out, err = run(t, ns, "diff", "--remote", "lab", "--labels", "env=edge")
	differs(g, err, out)
	g.Expect(out).To(And(ContainSubstring("  selects crds → lab\n"), ContainSubstring("Remote lab:\n  + crds v1.0.0\n")))

	// No change, no difference; bad input is an error (exit status 2).
	out, err = run(t, ns, "diff", "-f", manifest(t, ns, "crds", func(*fleeetv1.Module) {}))
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring("no plan changes"))
	_, err = run(t, ns, "diff", "--remote", "lab", "--labels", "env")
	g.Expect(fleetctl.ExitCode(err)).To(Equal(2))
	g.Expect(err).To(MatchError(ContainSubstring(`--labels "env": want k=v to set or k- to remove`)))

	g.Expect(specs(g, ns)).To(Equal(before), "a preview writes nothing")
}

// A Module change that would take a Remote's plan past the manager's
// --max-plan-bytes is previewed as the manager handles it: left out of
// that Remote's plan, naming the Remote, the limit and why, never added or
// changed; and so is a new version of a Module the plans leave out already.
func TestDiffPreviewsAModuleTooLargeForAPlanAsLeftOut(t *testing.T) {
	g := NewWithT(t)
	ns := fleetviewtest.Fleet(t, cluster)
	// hog is crds renamed, at tag, with values whose sync alone passes the
	// default limit.
	hog := func(tag string) func(*fleeetv1.Module) {
		return func(m *fleeetv1.Module) {
			m.Name, m.Spec.Sync.Source.Git.Tag = "hog", tag
			m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{}
			for i := range 600 {
				m.Spec.Sync.Package.Kustomize.Substitute[fmt.Sprintf("FILLER_%03d", i)] = strings.Repeat("x", 1000)
			}
		}
	}
	leftOut := func(remote string) string {
		return `Remote ` + remote + `:\n  left out: hog: (left out of the plan of Remote ` + remote +
			`: its sync alone makes a part of \d+ bytes, over the 524288-byte limit \(--max-plan-bytes\))\n`
	}

	out, err := run(t, ns, "diff", "-f", manifest(t, ns, "crds", hog("v1.0.0")))
	differs(g, err, out)
	g.Expect(out).To(MatchRegexp(`^create Module %s/hog\n  admitted \(server-side dry run\)\n  selects edge-1\n  selects edge-2\n%s%s$`,
		ns, leftOut("edge-1"), leftOut("edge-2")))

	// The manager leaves it out alike, and says so on the Module, for both
	// Remotes (then it is done writing its status, which a dry-run update
	// of it would conflict with).
	said := func(remote string) string { return regexp.MustCompile(leftOut(remote)).FindStringSubmatch(out)[1] }
	m := &fleeetv1.Module{}
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "crds"}, m)).To(Succeed())
	m.ObjectMeta = metav1.ObjectMeta{Namespace: ns}
	hog("v1.0.0")(m)
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	g.Eventually(func(g Gomega) *metav1.Condition {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		return apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.ReadyCondition)
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(And(HaveField("Reason", fleeetv1.ReasonPlanTooLarge),
		HaveField("Message", And(ContainSubstring(said("edge-1")), ContainSubstring(said("edge-2"))))))

	// A new version of it is left out again.
	out, err = run(t, ns, "diff", "-f", manifest(t, ns, "hog", hog("v1.1.0")))
	differs(g, err, out)
	g.Expect(out).To(MatchRegexp(`^update Module %s/hog\n  admitted \(server-side dry run\)\n%s%s$`, ns, leftOut("edge-1"), leftOut("edge-2")))
}
