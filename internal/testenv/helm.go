package testenv

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// HelmFor returns a Helm action configuration for one namespace of c,
// storing releases as Secrets the way the helm CLI does.
func HelmFor(t TB, c *Cluster, namespace string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &c.Kubeconfig, &namespace
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ChartOf loads one of the repository's charts.
func ChartOf(t TB, name string) *Chart {
	t.Helper()
	ch, err := loader.Load(filepath.Join(RepoRoot, "charts", name))
	if err != nil {
		t.Fatal(err)
	}
	return &Chart{name: name, chart: ch}
}

// Chart is a chart of this repository, loaded for the Helm SDK.
type Chart struct {
	name  string
	chart *chart.Chart
}

// Install installs the chart as release name into namespace.
func (h *Chart) Install(t TB, cfg *action.Configuration, name, namespace string, values map[string]any) *release.Release {
	t.Helper()
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace = name, namespace, true
	rel, err := in.RunWithContext(t.Context(), h.chart, values)
	if err != nil {
		t.Fatalf("helm install %s: %v", h.name, err)
	}
	return rel
}

// Template renders the chart as release name in namespace without
// installing it, as helm template does: lookups find nothing.
func (h *Chart) Template(t TB, name, namespace string, values map[string]any) *release.Release {
	t.Helper()
	in := action.NewInstall(&action.Configuration{Log: t.Logf})
	in.ReleaseName, in.Namespace, in.DryRun, in.ClientOnly, in.Replace = name, namespace, true, true, true
	rel, err := in.RunWithContext(t.Context(), h.chart, values)
	if err != nil {
		t.Fatalf("helm template %s: %v", h.name, err)
	}
	return rel
}

// Upgrade upgrades release name to the chart with values.
func (h *Chart) Upgrade(t TB, cfg *action.Configuration, name, namespace string, values map[string]any) *release.Release {
	t.Helper()
	up := action.NewUpgrade(cfg)
	up.Namespace = namespace
	rel, err := up.RunWithContext(t.Context(), name, h.chart, values)
	if err != nil {
		t.Fatalf("helm upgrade %s: %v", h.name, err)
	}
	return rel
}

// Uninstall removes release name without running its hooks, whose Pods
// need a node (test/ct runs them on one through ct install).
func Uninstall(t TB, cfg *action.Configuration, name string) {
	t.Helper()
	uninstall := action.NewUninstall(cfg)
	uninstall.DisableHooks = true
	if _, err := uninstall.Run(name); err != nil {
		t.Fatalf("helm uninstall %s: %v", name, err)
	}
}

// Objects decodes every object a release rendered.
func Objects(t TB, rel *release.Release) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("release %s: %v", rel.Name, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
}

// deployment returns the release's Deployment name.
func deployment(t TB, rel *release.Release, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range Objects(t, rel) {
		if o.GetKind() == "Deployment" && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("release %s renders no Deployment %s", rel.Name, name)
	return nil
}

// container returns the first container of the release's Deployment name,
// as the kubelet would see it.
func container(t TB, rel *release.Release, name string) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(deployment(t, rel, name).Object, "spec", "template", "spec", "containers")
	if len(cs) == 0 {
		t.Fatalf("the %s Deployment has no container", name)
	}
	return cs[0].(map[string]any)
}

// RunRelease runs bin on c as the release's Deployment (named after the
// release) would run it in a pod — see RunDeployment — with its health probe
// on a free local address and metrics off unless set gives them addresses.
// It returns once the process is ready.
func RunRelease(t TB, c *Cluster, rel *release.Release, bin string, set map[string]string, extra ...string) *Process {
	t.Helper()
	set = maps.Clone(set)
	if set == nil {
		set = map[string]string{}
	}
	health, ok := set["health-probe-bind-address"]
	if !ok {
		health = FreeAddr(t)
		set["health-probe-bind-address"] = health
	}
	if _, ok := set["metrics-bind-address"]; !ok {
		set["metrics-bind-address"] = "0"
	}
	p := RunDeployment(t, c, rel, rel.Name, bin, set, extra...)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := p.WaitHTTP(ctx, "http://"+health+"/readyz"); err != nil {
		t.Fatalf("%s: %v\n%s", rel.Name, err, Tail(p.LogPath, 40))
	}
	return p
}

// RunDeployment starts bin on c as the release's Deployment name would run
// it in a pod: as the ServiceAccount the Deployment names, with its
// arguments (set gives some flags new values, extra are appended) and its
// environment (POD_NAMESPACE-style field references resolved to the
// release namespace).
func RunDeployment(t TB, c *Cluster, rel *release.Release, name, bin string, set map[string]string, extra ...string) *Process {
	t.Helper()
	sa, _, _ := unstructured.NestedString(deployment(t, rel, name).Object, "spec", "template", "spec", "serviceAccountName")
	if sa == "" {
		t.Fatalf("the %s Deployment names no ServiceAccount", name)
	}
	env := []string{"KUBECONFIG=" + serviceAccountKubeconfig(t, c, rel.Namespace, sa)}
	vars, _, _ := unstructured.NestedSlice(container(t, rel, name), "env")
	for _, v := range vars {
		key, _, _ := unstructured.NestedString(v.(map[string]any), "name")
		value, _, _ := unstructured.NestedString(v.(map[string]any), "value")
		if field, _, _ := unstructured.NestedString(v.(map[string]any), "valueFrom", "fieldRef", "fieldPath"); field == "metadata.namespace" {
			value = rel.Namespace
		}
		env = append(env, key+"="+value)
	}
	return StartProcess(t, c.Name+"-"+name, bin, env, append(deploymentCommandLine(t, rel, name, set), extra...)...)
}

// CommandLine returns the arguments of the release's Deployment (named
// after the release) with the flags in set given new values — addresses
// and paths that differ outside a pod. A flag in set that the Deployment
// does not pass fails the test, so a renamed flag cannot slip by.
func CommandLine(t TB, rel *release.Release, set map[string]string) []string {
	t.Helper()
	return deploymentCommandLine(t, rel, rel.Name, set)
}

func deploymentCommandLine(t TB, rel *release.Release, name string, set map[string]string) []string {
	t.Helper()
	raw, _ := container(t, rel, name)["args"].([]any)
	left := maps.Clone(set)
	var args []string
	for _, a := range raw {
		arg := a.(string)
		flag, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if v, ok := left[flag]; ok {
			arg = "--" + flag + "=" + v
			delete(left, flag)
		}
		args = append(args, arg)
	}
	for flag := range left {
		t.Fatalf("the %s Deployment does not pass --%s", name, flag)
	}
	return args
}

// tokenLifetime is how long the tokens ServiceAccountToken and
// serviceAccountKubeconfig request stay valid.
const tokenLifetime = time.Hour

// serviceAccountKubeconfig writes a kubeconfig that authenticates to c as
// the ServiceAccount namespace/name only, as the kubelet's projected token
// does in a pod: the kubeconfig names a token file (client-go reads it
// again every minute), and a new token from the TokenRequest API replaces
// it at 80 % of its lifetime until the test ends. A process run with it
// outlives its first token, as a soak's agents and managers must.
func serviceAccountKubeconfig(t TB, c *Cluster, namespace, name string) string {
	t.Helper()
	return renewedKubeconfig(t, c, namespace, name, tokenLifetime*8/10)
}

// renewedKubeconfig is serviceAccountKubeconfig with the token replaced
// every renew.
func renewedKubeconfig(t TB, c *Cluster, namespace, name string, renew time.Duration) string {
	t.Helper()
	dir := t.TempDir()
	tokenFile, path := filepath.Join(dir, name+".token"), filepath.Join(dir, name+".kubeconfig")
	if err := writeToken(tokenFile, ServiceAccountToken(t, c, namespace, name)); err != nil {
		t.Fatal(err)
	}
	data := Kubeconfig(t, clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData},
		clientcmdapi.AuthInfo{TokenFile: tokenFile})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(renew)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// The test may have ended meanwhile: report on stderr, not t.
			token, err := requestToken(ctx, cs, namespace, name)
			if err == nil {
				err = writeToken(tokenFile, token)
			}
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "testenv: renewing the token of ServiceAccount %s/%s: %v\n", namespace, name, err)
			}
		}
	}()
	return path
}

// writeToken replaces the token file path whole, so that a reader never
// sees half a token.
func writeToken(path, token string) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(token), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ServiceAccountToken returns an hour's token of the ServiceAccount
// namespace/name from the TokenRequest API.
func ServiceAccountToken(t TB, c *Cluster, namespace, name string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	token, err := requestToken(t.Context(), cs, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// requestToken asks the TokenRequest API for a token of the ServiceAccount
// namespace/name valid for tokenLifetime.
func requestToken(ctx context.Context, cs kubernetes.Interface, namespace, name string) (string, error) {
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(tokenLifetime.Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// HelmCLI runs the pinned helm command against c, as a user at a shell
// does, with Helm's cache, configuration and data in the test's temporary
// directory, and returns its output.
func HelmCLI(t TB, c *Cluster, args ...string) string {
	t.Helper()
	out, err := TryHelmCLI(t, c, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TryHelmCLI runs helm as HelmCLI does but returns its output and error
// instead of failing the test, for a test that expects the apiserver to
// refuse what helm does.
func TryHelmCLI(t TB, c *Cluster, args ...string) (string, error) {
	t.Helper()
	helm, err := tool("helm")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), helm, args...)
	cmd.Env = append(os.Environ(), append(helmHomes(t.TempDir()), "KUBECONFIG="+c.Kubeconfig)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// helmHomes is the environment that keeps Helm's cache, configuration and
// data under home.
func helmHomes(home string) []string {
	return []string{"HELM_CACHE_HOME=" + filepath.Join(home, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data")}
}
