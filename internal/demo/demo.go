// Package demo builds a whole fleet on one machine from real parts: a
// management kube-apiserver running fleet-manager with its webhooks, three
// downstream ones each with Flux's controllers and a fleet-agent installed
// from its chart and registered through a RegistrationToken, a git server and
// a chart repository, one tenant and two Modules — platform CRDs through a
// Kustomization and an app through a HelmRelease that depends on them.
// `make demo` runs it; test/e2e runs it and then exercises the fleet.
package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetctl"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// Tenant is the management namespace the demo's clusters register into; the
// agent chart creates the namespace of the same name downstream.
const Tenant = "team-a"

// AgentNamespace is where the agent chart is installed downstream.
const AgentNamespace = "fleeet-system"

// Fleet is the running demo; its processes stop with the harness.
type Fleet struct {
	Management *testenv.Cluster
	// Downstream clusters by name: edge-1, edge-2, edge-3.
	Downstream map[string]*testenv.Cluster

	out   io.Writer
	start time.Time
}

// Names of the demo's downstream clusters.
var Names = []string{"edge-1", "edge-2", "edge-3"}

// Start brings the fleet up and registers every cluster, telling out what it
// does; component logs go to files under t's directories.
func Start(t testenv.TB, out io.Writer) *Fleet {
	f := &Fleet{Downstream: map[string]*testenv.Cluster{}, out: out, start: time.Now()}
	f.say("building fleet-manager, fleet-agent and the pinned tools (cached after the first run)")
	// One after the other: a failed build stops t, which only the calling
	// goroutine may do.
	managerBin := testenv.BuildCommand(t, "fleet-manager", "demo")
	agentBin := testenv.BuildCommand(t, "fleet-agent", "demo")

	f.say("starting the management control plane and %d downstream ones (kube-apiserver + etcd each)", len(Names))
	f.Management = testenv.StartCluster(t, "management", testenv.WithWebhooks())
	for i, c := range testenv.StartClusters(t, Names...) {
		f.Downstream[Names[i]] = c
	}
	for _, name := range Names {
		testenv.StartFlux(t, f.Downstream[name], testenv.SourceController, testenv.KustomizeController, testenv.HelmController)
	}
	f.say("Flux source-, kustomize- and helm-controller running for each downstream cluster")
	if err := f.Management.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleeet-system"}}); err != nil {
		t.Fatal(err)
	}
	testenv.StartManagerProcess(t, managerBin, f.Management, "--namespace=fleeet-system", "--offline-grace=20s")
	f.say("fleet-manager running, its admission webhooks registered")

	platform, charts := f.serveSources(t)
	f.createTenant(t, platform, charts)
	for _, name := range Names {
		f.register(t, name, agentBin)
	}
	return f
}

func (f *Fleet) say(format string, args ...any) {
	fmt.Fprintf(f.out, "[%5.1fs] %s\n", time.Since(f.start).Seconds(), fmt.Sprintf(format, args...))
}

// serveSources serves the platform repository (a CRD) over git and the app
// chart (a Widget, which needs that CRD) from a chart repository, and
// returns their URLs.
func (f *Fleet) serveSources(t testenv.TB) (platform, charts string) {
	crd, err := os.ReadFile(filepath.Join(testenv.RepoRoot, "internal", "controllers", "assemblage", "testdata", "crds", "widget.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	platform, _ = testenv.NewGitServer(t).Commit(t, "platform", map[string]string{
		"crds/kustomization.yaml": "resources: [widget.yaml]\n",
		"crds/widget.yaml":        string(crd),
	}, "v1.0.0")
	charts = testenv.NewChartRepo(t, testenv.ChartDir("widget")).URL
	f.say("serving git repository platform (tag v1.0.0) and chart repository with widget 0.1.0")
	return platform, charts
}

// createTenant makes the tenant namespace and its two Modules.
func (f *Fleet) createTenant(t testenv.TB, platformURL, chartsURL string) {
	ctx := t.Context()
	c := f.Management.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: Tenant, Labels: map[string]string{fleeetv1.TenantLabel: "true"},
		// Sources are served over plain http on loopback here.
		Annotations: map[string]string{"fleeet.dev/allow-insecure-http": "true"},
	}}); err != nil {
		t.Fatal(err)
	}
	all := &metav1.LabelSelector{}
	platform := &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: Tenant, Name: "platform", Labels: map[string]string{"tier": "platform"}},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: all,
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: platformURL, Tag: "v1.0.0"}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./crds"}},
			},
		}},
	}
	app := &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: Tenant, Name: "app"},
		Spec: fleeetv1.ModuleSpec{
			SyncPlacement: fleeetv1.SyncPlacement{
				Selector: all,
				Sync: fleeetv1.SyncSpec{
					Source: fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: chartsURL, Chart: "widget", Version: "0.1.0"}},
					Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{
						ReleaseName: "app", TargetNamespace: Tenant,
					}},
					DependsOn: []fleeetv1.Dependency{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "platform"}}}},
				},
			},
			Rollout: fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		},
	}
	for _, m := range []*fleeetv1.Module{platform, app} {
		if err := c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	f.say("tenant %s: Module platform (Kustomization, CRDs) and Module app (HelmRelease, depends on tier=platform, rolling update maxUnavailable=1)", Tenant)
}

// register does what a platform engineer does for one cluster: create a
// RegistrationToken, take the values its Secret holds, install the agent
// chart with them — and here, run the agent as the chart's ServiceAccount.
func (f *Fleet) register(t testenv.TB, name, agentBin string) {
	ctx := t.Context()
	valuesFile := filepath.Join(t.TempDir(), name+"-values.yaml")
	if out, err := f.Fleetctl(ctx, "token", "create", name, "--labels", "region="+region(name), "--values-file", valuesFile); err != nil {
		t.Fatalf("fleetctl token create %s: %v\n%s", name, err, out)
	}
	data, err := os.ReadFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	values["clusterName"] = name
	values["heartbeatInterval"] = "5s"
	// The platform Module installs CRDs, so the tenant's ServiceAccount
	// needs cluster-wide rights on these clusters.
	values["tenantServiceAccount"] = map[string]any{"clusterRole": "cluster-admin", "clusterWide": true}

	down := f.Downstream[name]
	rel := testenv.ChartOf(t, "fleet-agent").Install(t, testenv.HelmFor(t, down, AgentNamespace), "fleet-agent", AgentNamespace, values)
	testenv.RunRelease(t, down, rel, agentBin, nil)
	f.say("%s: RegistrationToken %s created with fleetctl, fleet-agent chart installed from its values, agent running as the chart's ServiceAccount", name, name)
}

func region(name string) string {
	if name == "edge-3" {
		return "us"
	}
	return "eu"
}

// Fleetctl runs fleetctl with args against the tenant's namespace and
// returns what it printed.
func (f *Fleet) Fleetctl(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := fleetctl.NewCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--kubeconfig", f.Management.Kubeconfig, "--namespace", Tenant}, args...))
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// WaitConverged shows the fleet grid each time it changes until every
// cluster runs every Module Ready at its current version.
func (f *Fleet) WaitConverged(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		out, err := f.Fleetctl(ctx, "status")
		if err == nil && out != last {
			f.say("fleetctl status\n%s", indent(out))
			last = out
		}
		if err == nil && converged(out) {
			f.say("every cluster runs every Module Ready")
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the fleet did not converge: %w\n%s", ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
}

// converged reads a `fleetctl status` grid: a row per cluster, and in it a
// "ready VERSION" cell per Module, at the Module's current version (no *).
func converged(grid string) bool {
	lines := strings.Split(strings.TrimSpace(grid), "\n")
	if len(lines) != len(Names)+1 {
		return false
	}
	modules := len(strings.Fields(lines[0])) - 1
	for _, row := range lines[1:] {
		cells := strings.Fields(row)[1:]
		if len(cells) != 2*modules {
			return false
		}
		for i := 0; i < len(cells); i += 2 {
			if cells[i] != "ready" || strings.HasSuffix(cells[i+1], "*") {
				return false
			}
		}
	}
	return true
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// Guide prints where to look once the fleet runs.
func (f *Fleet) Guide(w io.Writer, logs string) {
	fmt.Fprintf(w, "\nThe fleet is running. Look around:\n")
	fmt.Fprintf(w, "  %-20s export KUBECONFIG=%s\n", "management cluster:", f.Management.Kubeconfig)
	for _, name := range Names {
		fmt.Fprintf(w, "  %-20s export KUBECONFIG=%s\n", name+" cluster:", f.Downstream[name].Kubeconfig)
	}
	fmt.Fprintf(w, "  fleetctl:            go run ./cmd/fleetctl --kubeconfig %s -n %s status\n", f.Management.Kubeconfig, Tenant)
	fmt.Fprintf(w, "                       go run ./cmd/fleetctl --kubeconfig %s -n %s why app --remote edge-1\n", f.Management.Kubeconfig, Tenant)
	paths, _ := filepath.Glob(filepath.Join(logs, "*", "*.log"))
	fmt.Fprintf(w, "  component logs:\n")
	for _, p := range paths {
		fmt.Fprintf(w, "    %s\n", p)
	}
}
