// Package testenv runs the real components fleeet's tests need: kube-apiservers
// with etcd (through controller-runtime's envtest), Flux's source-, kustomize-
// and helm-controller and cert-manager's controller and cainjector as
// processes, a smart-HTTP git server and a Helm chart repository, and, for
// clusters started WithNodes, nodes that run real Pods
// (Cluster.StartNode: kubelet, containerd and kube-proxy, with
// kube-controller-manager and kube-scheduler for the cluster). Every program
// comes from hack/tools, built once into the tools cache on first use, except
// containerd, runc and the CNI plugins, which are Debian packages
// (hack/setup-debian.sh).
package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TB is what the harness needs of a test: testing.TB has it all, and
// `make demo` runs the same components outside a test with its own.
type TB interface {
	Helper()
	Cleanup(func())
	Context() context.Context
	TempDir() string
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
	Failed() bool
}

// RepoRoot is the root of the fleeet repository the program runs in: the
// nearest directory at or above the working directory whose go.mod declares
// the module. go test runs a package's tests in its directory, and make
// demo runs from the root. (Builds are -trimpath, so the source file's own
// path names no directory.)
var RepoRoot = func() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("testenv: %v", err))
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(mod), "module "+modulePath+"\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("testenv: run outside the " + modulePath + " repository")
		}
		dir = parent
	}
}()

// modulePath is the Go module of the fleeet repository.
const modulePath = "github.com/fleeet-dev/fleeet"

var (
	toolsMu sync.Mutex
	tools   = map[string]string{}
)

// tool returns the path of a program pinned in hack/tools, building it into
// the tools cache if it is not there yet. $FLEEET_TOOL_<NAME> (upper case,
// dashes as underscores) overrides the path.
func tool(name string) (string, error) {
	toolsMu.Lock()
	defer toolsMu.Unlock()
	if p, ok := tools[name]; ok {
		return p, nil
	}
	env := "FLEEET_TOOL_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	if p := os.Getenv(env); p != "" {
		tools[name] = p
		return p, nil
	}
	out, err := runIn(RepoRoot, filepath.Join(RepoRoot, "hack", "tools", "build.sh"), name)
	if err != nil {
		return "", fmt.Errorf("building tool %s: %w", name, err)
	}
	_, dir, ok := strings.Cut(strings.TrimSpace(out), "=")
	if !ok {
		return "", fmt.Errorf("building tool %s: unexpected output %q", name, out)
	}
	p := filepath.Join(dir, name)
	tools[name] = p
	return p, nil
}

// CertManagerCRDDirectory returns the deploy/crds directory of the
// cert-manager module pinned in hack/tools/cert-manager, the release
// StartCertManager runs, so the fleet-manager chart's Issuer and Certificate
// meet a real schema.
var CertManagerCRDDirectory = sync.OnceValues(func() (string, error) {
	dir, err := moduleDir(filepath.Join(RepoRoot, "hack", "tools", "cert-manager"), "github.com/cert-manager/cert-manager")
	return filepath.Join(dir, "deploy", "crds"), err
})

// prometheusOperator is the prometheus-operator release whose CRDs tests
// install, so the charts' ServiceMonitors and PrometheusRules meet a real
// schema.
const prometheusOperator = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// PrometheusOperatorCRDDirectory returns the directory of prometheus-operator's
// CRDs in its Go module, downloaded once.
var PrometheusOperatorCRDDirectory = sync.OnceValues(func() (string, error) {
	dir, err := moduleDir(os.TempDir(), prometheusOperator)
	return filepath.Join(dir, "example", "prometheus-operator-crd"), err
})

// moduleDir downloads module (a path, resolved by the go.mod in dir, or
// path@version) into the module cache and returns its directory there.
func moduleDir(dir, module string) (string, error) {
	out, err := runIn(dir, "go", "mod", "download", "-json", module)
	if err != nil {
		return "", fmt.Errorf("downloading %s: %w", module, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &mod); err != nil {
		return "", fmt.Errorf("downloading %s: %w", module, err)
	}
	return mod.Dir, nil
}

// fluxCRDDirectories returns the config/crd/bases directories of the Flux
// controller modules pinned in hack/tools, so tests install exactly the CRDs
// of the controllers they run.
var fluxCRDDirectories = sync.OnceValues(locateFluxCRDDirectories)

func locateFluxCRDDirectories() ([]string, error) {
	mods := []string{
		"github.com/fluxcd/source-controller",
		"github.com/fluxcd/kustomize-controller",
		"github.com/fluxcd/helm-controller",
	}
	args := append([]string{"mod", "download"}, mods...)
	if _, err := runIn(filepath.Join(RepoRoot, "hack", "tools"), "go", args...); err != nil {
		return nil, fmt.Errorf("downloading Flux modules: %w", err)
	}
	args = append([]string{"list", "-m", "-f", "{{.Dir}}"}, mods...)
	out, err := runIn(filepath.Join(RepoRoot, "hack", "tools"), "go", args...)
	if err != nil {
		return nil, fmt.Errorf("locating Flux modules: %w", err)
	}
	var dirs []string
	for _, d := range strings.Fields(out) {
		dirs = append(dirs, filepath.Join(d, "config", "crd", "bases"))
	}
	return dirs, nil
}

// goFlags are the go command's flags for what the tests build, as the
// Makefile sets them: -trimpath keys the build cache by content alone, so
// a fresh clone at another path reuses what an earlier build compiled.
const goFlags = "-buildvcs=false -trimpath"

// runIn runs a command in dir and returns its standard output; on failure the
// error carries standard error.
func runIn(dir, name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS="+goFlags)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// The inventory APIs whose CRDs WithInventoryCRDs serves: Cluster API (its
// Cluster, v1beta1 and v1beta2) and the sig-multicluster cluster inventory
// API (ClusterProfile).
const (
	clusterAPI          = "sigs.k8s.io/cluster-api@v1.11.3"
	clusterInventoryAPI = "sigs.k8s.io/cluster-inventory-api@v0.1.0"
)

// WithInventoryCRDs adds Cluster API's Cluster CRD and the ClusterProfile
// CRD, as their modules ship them, to the cluster's CRDs.
func WithInventoryCRDs() ClusterOption {
	return func(env *envtest.Environment, _ string) error {
		crds, err := inventoryCRDs()
		if err != nil {
			return err
		}
		env.CRDDirectoryPaths = append(env.CRDDirectoryPaths, crds...)
		return nil
	}
}

// InstallInventoryCRDs installs the CRDs WithInventoryCRDs adds into c,
// which started without them, as an admin does after the manager started.
func (c *Cluster) InstallInventoryCRDs(t TB) {
	t.Helper()
	c.installCRDs(t, "the inventory CRDs", inventoryCRDs)
}

// inventoryCRDs are the files of Cluster API's Cluster CRD and of the
// ClusterProfile CRD.
func inventoryCRDs() ([]string, error) {
	capi, err := moduleDir(os.TempDir(), clusterAPI)
	if err != nil {
		return nil, err
	}
	inventory, err := moduleDir(os.TempDir(), clusterInventoryAPI)
	if err != nil {
		return nil, err
	}
	return []string{filepath.Join(capi, "config", "crd", "bases", "cluster.x-k8s.io_clusters.yaml"),
		filepath.Join(inventory, "config", "crd", "bases", "multicluster.x-k8s.io_clusterprofiles.yaml")}, nil
}
