// Package demo builds a whole fleet on one machine from real parts: a
// management kube-apiserver running fleet-manager with its webhooks and
// its recovery endpoint, three
// downstream ones each with a real node (containerd, kubelet, kube-proxy),
// Flux's controllers and a fleet-agent installed from its chart and
// registered through a RegistrationToken, an SSH git server and an OCI
// registry requiring credentials, one tenant and two Modules of podinfo — a
// backend from git over SSH through a Kustomization and a frontend, its chart
// from the registry, through a HelmRelease that waits for it, with
// per-cluster values bound from each Remote.
// `make demo` runs it; test/e2e runs it and then exercises the fleet.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// The demo's Modules, and what they run downstream.
const (
	// Backend is podinfo's kustomize directory from git over SSH, as
	// Deployment "podinfo" and its Service.
	Backend = "backend"
	// BackendVersion is the git tag the backend Module starts at.
	BackendVersion = "v1.0.0"
	// Frontend is podinfo's Helm chart from an OCI registry, released as
	// "frontend" (Deployment frontend-podinfo), waiting for every Module
	// labelled tier=backend.
	Frontend = "frontend"
	// FrontendDeployment is the frontend's Deployment downstream.
	FrontendDeployment = "frontend-podinfo"
	// tenantRole is the ClusterRole the agent chart binds in the tenant
	// namespace for Flux to apply the tenant's syncs as.
	tenantRole = "team-a-apps"
)

// Fleet is the running demo; its processes stop with the harness.
type Fleet struct {
	Management *testenv.Cluster
	// Downstream clusters by name: edge-1, edge-2, edge-3.
	Downstream map[string]*testenv.Cluster
	// Podinfo is the workload, built from its Go module.
	Podinfo *testenv.Podinfo
	// Git holds the backend's repository, served over SSH at BackendRepo.
	Git         *testenv.GitServer
	SSH         *testenv.SSHGitServer
	BackendRepo string
	// Registry holds podinfo's chart, at FrontendChart.
	Registry      *testenv.OCIRegistry
	FrontendChart string
	// FrontendChartVersion is the version of podinfo's chart the frontend
	// Module installs.
	FrontendChartVersion string
	// ManagerMetrics is the address of fleet-manager's metrics endpoint,
	// served over HTTPS to ManagerMetricsToken's holder.
	ManagerMetrics      string
	ManagerMetricsToken string
	// AgentMetrics maps each downstream cluster to its fleet-agent's
	// metrics endpoint, served over HTTPS to AgentMetricsTokens' holders:
	// ServiceAccounts bound to the agent chart's metrics-reader ClusterRole.
	AgentMetrics       map[string]string
	AgentMetricsTokens map[string]string

	// The processes, for a test to stop, kill or restart: the manager (its
	// binary, and the flags it runs with besides testenv's), each
	// downstream cluster's node, Flux controllers and agent.
	ManagerBin   string
	ManagerFlags []string
	Manager      *testenv.Process
	Nodes        map[string]*testenv.Node
	Flux         map[string]map[testenv.FluxController]*testenv.Process
	Agents       map[string]*testenv.Process
	// Links are each cluster's network to the management cluster: its
	// agent reaches the management API and the manager's recovery
	// endpoint through it, and a test cuts it to take the cluster off the
	// network.
	Links map[string]*Link
	// recovery is the address of the manager's recovery endpoint.
	recovery string

	out   io.Writer
	start time.Time
}

// Names of the demo's downstream clusters.
var Names = []string{"edge-1", "edge-2", "edge-3"}

// Start brings the fleet up and registers every cluster, telling out what it
// does; component logs go to files under t's directories. On a machine that
// cannot run containers it stops t, saying why.
func Start(t testenv.TB, out io.Writer) *Fleet {
	f := &Fleet{Downstream: map[string]*testenv.Cluster{}, AgentMetrics: map[string]string{}, AgentMetricsTokens: map[string]string{},
		Nodes: map[string]*testenv.Node{}, Flux: map[string]map[testenv.FluxController]*testenv.Process{}, Agents: map[string]*testenv.Process{},
		Links: map[string]*Link{}, out: out, start: time.Now()}
	f.say("building fleet-manager, fleet-agent, podinfo and the pinned tools (cached after the first run)")
	// One after the other: a failed build stops t, which only the calling
	// goroutine may do.
	f.ManagerBin = testenv.BuildCommand(t, "fleet-manager", "demo")
	agentBin := testenv.BuildCommand(t, "fleet-agent", "demo")
	f.Podinfo = testenv.GetPodinfo(t)

	f.say("starting the management control plane and %d downstream ones (kube-apiserver + etcd each; downstream with kube-controller-manager and kube-scheduler)", len(Names))
	f.Management = testenv.StartCluster(t, "management", testenv.WithWebhooks())
	for i, c := range testenv.StartClusters(t, Names, testenv.WithNodes()) {
		f.Downstream[Names[i]] = c
	}
	for _, name := range Names {
		down := f.Downstream[name]
		f.Nodes[name] = down.StartNode(t, name)
		f.Nodes[name].ImportImage(t, f.Podinfo.Archive)
		f.Flux[name] = testenv.StartFlux(t, down, testenv.SourceController, testenv.KustomizeController, testenv.HelmController)
	}
	f.say("each downstream cluster has a Ready node (containerd, kubelet, kube-proxy) holding podinfo's image, and Flux source-, kustomize- and helm-controller")
	if err := f.Management.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleeet-system"}}); err != nil {
		t.Fatal(err)
	}
	f.ManagerMetrics = testenv.FreeAddr(t)
	f.ManagerFlags = append([]string{"--namespace=fleeet-system", "--offline-grace=20s"}, f.serveRecovery(t)...)
	f.Manager = testenv.StartManagerProcess(t, f.ManagerBin, f.Management, append(f.ManagerFlags, "--metrics-bind-address="+f.ManagerMetrics)...)
	f.ManagerMetricsToken = testenv.MetricsReaderToken(t, f.Management, "")
	f.say("fleet-manager running, its admission webhooks registered, its recovery endpoint serving")

	f.serveSources(t)
	f.createTenant(t)
	for _, name := range Names {
		f.register(t, name, agentBin)
	}
	return f
}

func (f *Fleet) say(format string, args ...any) {
	fmt.Fprintf(f.out, "[%5.1fs] %s\n", time.Since(f.start).Seconds(), fmt.Sprintf(format, args...))
}

// serveSources serves podinfo's kustomize directory from git over SSH (tag
// BackendVersion) and pushes its chart to an OCI registry; both require
// credentials, which register gives each cluster.
func (f *Fleet) serveSources(t testenv.TB) {
	f.Git = testenv.NewGitServer(t)
	f.SSH = f.Git.ServeSSH(t)
	f.BackendRepo = f.CommitBackend(t, BackendVersion, nil)
	f.Registry = testenv.NewPrivateRegistry(t)
	f.FrontendChart, f.FrontendChartVersion, _ = f.Registry.PushChart(t, "charts", f.Podinfo.ChartDir())
	f.say("serving git repository podinfo over SSH (kustomize directory ./backend, tag %s, host key pinned) and podinfo's chart %s from an OCI registry over TLS, both requiring credentials", BackendVersion, f.FrontendChartVersion)
}

// CommitBackend commits podinfo's kustomize directory, changed by edit (see
// testenv.Podinfo.Kustomize) when not nil, as ./backend of the backend's
// repository, tags it and returns the repository's URL. The backend runs one
// pod: its HorizontalPodAutoscaler is left out, as no cluster here serves
// resource metrics.
func (f *Fleet) CommitBackend(t testenv.TB, tag string, edit func(name string, content []byte) []byte) string {
	files := f.Podinfo.Kustomize(t, "backend", func(name string, content []byte) []byte {
		if name == "kustomization.yaml" {
			content = bytes.Replace(content, []byte("  - hpa.yaml\n"), nil, 1)
		}
		if edit != nil {
			content = edit(name, content)
		}
		return content
	})
	f.Git.Commit(t, "podinfo", files, tag)
	return f.SSH.URL + "/podinfo.git"
}

// SSHSource is repository repo of the demo's git server at tag, as a Module
// names it: over SSH, with the tenant's SSH credentials.
func (f *Fleet) SSHSource(repo, tag string) fleeetv1.Source {
	return fleeetv1.Source{Git: &fleeetv1.GitSource{URL: f.SSH.URL + "/" + repo + ".git", Tag: tag},
		SecretRef: &fleeetv1.LocalObjectReference{Name: gitSecret}}
}

// The Secrets of the tenant namespace that hold the sources' credentials,
// delivered to every cluster by the Modules that use them.
const (
	gitSecret        = "git-ssh"
	RegistrySecret   = "registry"
	registryCASecret = "registry-ca"
)

// createTenant makes the tenant namespace and its two Modules.
func (f *Fleet) createTenant(t testenv.TB) {
	ctx := t.Context()
	c := f.Management.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: Tenant, Labels: map[string]string{fleeetv1.TenantLabel: "true"},
	}}); err != nil {
		t.Fatal(err)
	}
	f.sourceSecrets(t)
	all := &metav1.LabelSelector{}
	oneAtATime := fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	backend := &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: Tenant, Name: Backend, Labels: map[string]string{"tier": "backend"}},
		Spec: fleeetv1.ModuleSpec{
			SyncPlacement: fleeetv1.SyncPlacement{
				Selector: all,
				Sync: fleeetv1.SyncSpec{
					Source: fleeetv1.Source{
						Git:       &fleeetv1.GitSource{URL: f.BackendRepo, Tag: BackendVersion},
						SecretRef: &fleeetv1.LocalObjectReference{Name: gitSecret},
					},
					Secrets: []fleeetv1.SecretDelivery{{Name: gitSecret}},
					Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{
						Path: "./backend", TargetNamespace: Tenant,
						// Ready means podinfo's pods are (Flux's wait); a
						// version whose pods never get there fails after a
						// minute.
						Timeout: &metav1.Duration{Duration: time.Minute},
					}},
				},
			},
			Rollout: oneAtATime,
		},
	}
	values, err := json.Marshal(map[string]any{
		"ui": map[string]any{"message": "frontend on $(CLUSTER) in $(REGION)"},
		// The frontend's /echo calls the backend's Service.
		"backend": "http://podinfo:9898/echo",
	})
	if err != nil {
		t.Fatal(err)
	}
	remoteField := func(name, path string) fleeetv1.ControlPlaneBinding {
		return fleeetv1.ControlPlaneBinding{Name: name, ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "Remote", FieldPath: path}}
	}
	frontend := &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: Tenant, Name: Frontend},
		Spec: fleeetv1.ModuleSpec{
			SyncPlacement: fleeetv1.SyncPlacement{
				Selector: all,
				Sync: fleeetv1.SyncSpec{
					Source: fleeetv1.Source{
						OCI:           &fleeetv1.OCISource{URL: f.FrontendChart, Tag: f.FrontendChartVersion},
						SecretRef:     &fleeetv1.LocalObjectReference{Name: RegistrySecret},
						CertSecretRef: &fleeetv1.LocalObjectReference{Name: registryCASecret},
					},
					Secrets: []fleeetv1.SecretDelivery{{Name: RegistrySecret}, {Name: registryCASecret}},
					Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{
						ReleaseName: Frontend, TargetNamespace: Tenant, Values: &apiextensionsv1.JSON{Raw: values},
					}},
					DependsOn: []fleeetv1.Dependency{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "backend"}}}},
				},
				ControlPlaneBindings: []fleeetv1.ControlPlaneBinding{
					remoteField("CLUSTER", "/metadata/name"),
					remoteField("REGION", "/metadata/labels/region"),
				},
				// The us region's clusters get their own message, picked
				// by their label: no binding makes it.
				Overrides: []fleeetv1.Override{{Name: "us",
					Selector: metav1.LabelSelector{MatchLabels: map[string]string{"region": "us"}},
					Helm:     &fleeetv1.HelmOverride{Values: &apiextensionsv1.JSON{Raw: []byte(`{"ui":{"message":"` + usMessage + `"}}`)}},
				}},
			},
			Rollout: oneAtATime,
		},
	}
	for _, m := range []*fleeetv1.Module{backend, frontend} {
		if err := c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	f.say("tenant %s: Module backend (podinfo from git over SSH through a Kustomization) and Module frontend (podinfo's chart from the OCI registry through a HelmRelease, waits for tier=backend, message bound from each Remote but set by an override in region us), both rolled out one cluster at a time, each delivering its source's credentials to every cluster", Tenant)
}

// register does what a platform engineer does for one cluster: give the
// tenant a role there, create a RegistrationToken, take the values its
// Secret holds, install the agent chart with them — and here, reach the
// management API through the cluster's Link and run the agent as the
// chart's ServiceAccount.
func (f *Fleet) register(t testenv.TB, name, agentBin string) {
	ctx := t.Context()
	down := f.Downstream[name]
	if err := down.Client.Create(ctx, f.Podinfo.TenantRole(tenantRole)); err != nil {
		t.Fatal(err)
	}
	valuesFile := filepath.Join(t.TempDir(), name+"-values.yaml")
	if out, err := f.Fleetctl(ctx, "token", "create", name, "--labels", "region="+Region(name), "--values-file", valuesFile); err != nil {
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
	api, err := url.Parse(f.Management.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	f.Links[name] = &Link{API: testenv.NewProxy(t, api.Host), Recovery: testenv.NewProxy(t, f.recovery)}
	values["management"] = map[string]any{"url": "https://" + f.Links[name].API.Addr, "recoveryURL": "https://" + f.Links[name].Recovery.Addr}
	values["heartbeatInterval"] = "5s"
	values["tenantServiceAccount"] = map[string]any{"clusterRole": tenantRole}

	rel := testenv.ChartOf(t, "fleet-agent").Install(t, testenv.HelmFor(t, down, AgentNamespace), "fleet-agent", AgentNamespace, values)
	f.AgentMetrics[name] = testenv.FreeAddr(t)
	f.Agents[name] = testenv.RunRelease(t, down, rel, agentBin, map[string]string{"metrics-bind-address": f.AgentMetrics[name]})
	f.AgentMetricsTokens[name] = testenv.MetricsReaderToken(t, down, rel.Name+"-metrics-reader")
	f.say("%s: RegistrationToken %s created with fleetctl, fleet-agent chart installed from its values, agent running as the chart's ServiceAccount", name, name)
}

// serveRecovery returns the manager flags that serve its recovery
// endpoint, where an agent whose credential the management API rejects
// gets a new one, as the manager chart's recovery values do.
func (f *Fleet) serveRecovery(t testenv.TB) []string {
	certDir, ca := testenv.ServingCertificate(t)
	caFile := filepath.Join(t.TempDir(), "recovery-ca.crt")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	f.recovery = testenv.FreeAddr(t)
	return []string{"--recovery-bind-address=" + f.recovery, "--recovery-cert-dir=" + certDir,
		"--recovery-url=https://" + f.recovery, "--recovery-ca-file=" + caFile}
}

// Link is one cluster's network to the management cluster: a proxy to
// its API and one to the manager's recovery endpoint.
type Link struct{ API, Recovery *testenv.Proxy }

// Cut takes the cluster off the management network: open connections
// break and new ones are refused.
func (l *Link) Cut() {
	l.API.Cut()
	l.Recovery.Cut()
}

// Restore puts the cluster back on the management network.
func (l *Link) Restore() error {
	return errors.Join(l.API.Restore(), l.Recovery.Restore())
}

// Hold partitions the cluster silently: nothing breaks and nothing
// arrives, until Release.
func (l *Link) Hold() {
	l.API.Hold()
	l.Recovery.Hold()
}

// Release ends Hold.
func (l *Link) Release() {
	l.API.Release()
	l.Recovery.Release()
}

// sourceSecrets creates the sources' credentials in the tenant namespace
// of the management cluster, offered for delivery: the Modules that use
// them deliver them into the tenant namespace of every cluster.
func (f *Fleet) sourceSecrets(t testenv.TB) {
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: gitSecret}, Data: map[string][]byte{
			"identity": f.SSH.Identity, "known_hosts": []byte(f.SSH.KnownHosts)}},
		{ObjectMeta: metav1.ObjectMeta{Name: RegistrySecret}, Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{
			corev1.DockerConfigJsonKey: f.Registry.DockerConfigJSON(t, f.Registry.Password)}},
		{ObjectMeta: metav1.ObjectMeta{Name: registryCASecret}, Data: map[string][]byte{"ca.crt": f.Registry.CA}},
	} {
		s.Namespace, s.Labels = Tenant, map[string]string{fleeetv1.DeliverableLabel: "true"}
		if err := f.Management.Client.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
}

// usMessage is the frontend's message in the us region, set by the
// frontend Module's override for it.
const usMessage = "frontend in the us region, from its override"

// WantMessage is the message a demo cluster's frontend answers with: bound
// from its Remote's name and region, or in the us region its override's.
func WantMessage(name string) string {
	if Region(name) == "us" {
		return usMessage
	}
	return "frontend on " + name + " in " + Region(name)
}

// Region is the region label a demo cluster registers with.
func Region(name string) string {
	if name == "edge-3" {
		return "us"
	}
	return "eu"
}

// FrontendURL is the address of one Ready frontend Pod of a cluster, which
// this host reaches.
func (f *Fleet) FrontendURL(ctx context.Context, cluster string) (string, error) {
	return f.PodinfoURL(ctx, cluster, FrontendDeployment)
}

// PodinfoURL is the address of one Ready Pod of a podinfo Deployment in
// the tenant's namespace of a cluster, which this host reaches.
func (f *Fleet) PodinfoURL(ctx context.Context, cluster, deployment string) (string, error) {
	c := f.Downstream[cluster].Client
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: Tenant, Name: deployment}, d); err != nil {
		return "", err
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(Tenant), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.Status.PodIP != "" {
				return "http://" + p.Status.PodIP + ":9898/", nil
			}
		}
	}
	return "", fmt.Errorf("no Ready pod of Deployment %s/%s on %s", Tenant, deployment, cluster)
}

// FrontendMessage is what a cluster's frontend says: the message of
// podinfo's / answer from one of its Pods.
func (f *Fleet) FrontendMessage(ctx context.Context, cluster string) (string, error) {
	return f.PodinfoMessage(ctx, cluster, FrontendDeployment)
}

// PodinfoMessage is what a podinfo Deployment of a cluster says: the
// message of podinfo's / answer from one of its Pods.
func (f *Fleet) PodinfoMessage(ctx context.Context, cluster, deployment string) (string, error) {
	url, err := f.PodinfoURL(ctx, cluster, deployment)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var answer struct{ Message string }
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&answer); err != nil {
		return "", fmt.Errorf("GET %s: %s: %w", url, resp.Status, err)
	}
	return answer.Message, nil
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
// cell per Module that says "ready" at the Module's current version (no *).
func converged(grid string) bool {
	lines := strings.Split(strings.TrimSpace(grid), "\n")
	if len(lines) != len(Names)+1 {
		return false
	}
	modules := len(Cells(lines[0])) - 1
	for _, row := range lines[1:] {
		cells := Cells(row)[1:]
		if len(cells) != modules {
			return false
		}
		for _, cell := range cells {
			words := strings.Fields(cell)
			if len(words) < 2 || words[0] != "ready" || strings.HasSuffix(words[1], "*") {
				return false
			}
		}
	}
	return true
}

// cellGap separates the columns of a `fleetctl status` row.
var cellGap = regexp.MustCompile(`\s{2,}`)

// Cells splits a `fleetctl status` row into its columns.
func Cells(row string) []string { return cellGap.Split(strings.TrimSpace(row), -1) }

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// Guide prints where to look once the fleet runs.
func (f *Fleet) Guide(ctx context.Context, w io.Writer, logs string) {
	fmt.Fprintf(w, "\nThe fleet is running. Look around:\n")
	fmt.Fprintf(w, "  %-20s export KUBECONFIG=%s\n", "management cluster:", f.Management.Kubeconfig)
	for _, name := range Names {
		fmt.Fprintf(w, "  %-20s export KUBECONFIG=%s\n", name+" cluster:", f.Downstream[name].Kubeconfig)
	}
	fmt.Fprintf(w, "  fleetctl:            go run ./cmd/fleetctl --kubeconfig %s -n %s status\n", f.Management.Kubeconfig, Tenant)
	fmt.Fprintf(w, "                       go run ./cmd/fleetctl --kubeconfig %s -n %s why %s --remote edge-1\n", f.Management.Kubeconfig, Tenant, Frontend)
	if url, err := f.FrontendURL(ctx, Names[0]); err == nil {
		fmt.Fprintf(w, "  %-20s curl %s   (podinfo, frontend Pod on %s)\n", "the app:", url, Names[0])
	} else {
		fmt.Fprintf(w, "  %-20s %v\n", "the app:", err)
	}
	paths, _ := filepath.Glob(filepath.Join(logs, "*", "*.log"))
	fmt.Fprintf(w, "  component logs:\n")
	for _, p := range paths {
		fmt.Fprintf(w, "    %s\n", p)
	}
}
