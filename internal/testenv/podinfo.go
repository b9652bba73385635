package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/fleeet-dev/fleeet/internal/ociimage"
)

// podinfo is stefanprodan/podinfo, the Flux project's demo application. The
// module proxy here serves no tagged version of it; this pseudo-version holds
// the podinfo 6.9.2 sources (Go 1.25).
const (
	podinfoModule  = "github.com/stefanprodan/podinfo"
	podinfoVersion = "v1.8.1-0.20250910200901-e86405a8674e"
)

// Podinfo is a real workload for tests and the demo: an HTTP server with
// liveness and readiness endpoints, shipped with a kustomize directory
// (Deployment, Service, HPA) and a Helm chart, both naming Image.
type Podinfo struct {
	// Dir is podinfo's source in the Go module cache; it is read-only.
	Dir string
	// Image is the image reference the kustomize directory and the chart
	// name by default (ghcr.io/stefanprodan/podinfo:<appVersion>).
	Image string
	// Archive is an OCI archive of Image, built here from the Go module:
	// podinfo as the entrypoint and podcli, which its probes run, on PATH.
	Archive string
}

var (
	podinfoOnce sync.Once
	podinfo     *Podinfo
	podinfoErr  error
)

// GetPodinfo downloads podinfo's module and builds its image once per tools
// cache (about two minutes cold), then returns it.
func GetPodinfo(t TB) *Podinfo {
	t.Helper()
	podinfoOnce.Do(func() { podinfo, podinfoErr = buildPodinfo() })
	if podinfoErr != nil {
		t.Fatalf("podinfo: %v", podinfoErr)
	}
	return podinfo
}

func buildPodinfo() (*Podinfo, error) {
	out, err := runIn(RepoRoot, "go", "mod", "download", "-json", podinfoModule+"@"+podinfoVersion)
	if err != nil {
		return nil, err
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &mod); err != nil {
		return nil, fmt.Errorf("reading go mod download's answer: %w", err)
	}
	p := &Podinfo{Dir: mod.Dir}
	chart, err := os.ReadFile(p.ChartDir() + "/Chart.yaml")
	if err != nil {
		return nil, err
	}
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chart, &meta); err != nil {
		return nil, fmt.Errorf("podinfo's Chart.yaml: %w", err)
	}
	p.Image = "ghcr.io/stefanprodan/podinfo:" + meta.AppVersion

	cache, err := toolsCache()
	if err != nil {
		return nil, err
	}
	p.Archive = filepath.Join(cache, "podinfo", podinfoVersion, "podinfo.oci.tar")
	if _, err := os.Stat(p.Archive); err == nil {
		return p, nil
	}
	return p, p.buildImage()
}

// buildImage builds podinfo and podcli from the module and writes the image
// archive, through a temporary name so an interrupted build never looks done.
func (p *Podinfo) buildImage() error {
	var bins [2][]byte
	for i, cmd := range []string{"podinfo", "podcli"} {
		bin, err := ociimage.GoBinary(context.Background(), p.Dir, "./cmd/"+cmd, "")
		if err != nil {
			return err
		}
		bins[i] = bin
	}
	return cacheImage(ociimage.Spec{
		Name:    "podinfo",
		Binary:  bins[0],
		Files:   []ociimage.File{{Path: "/usr/local/bin/podcli", Mode: 0o755, Body: bins[1]}},
		Created: time.Unix(0, 0).UTC(),
		Annotations: map[string]string{
			"org.opencontainers.image.title":   "podinfo",
			"org.opencontainers.image.version": podinfoVersion,
			"org.opencontainers.image.source":  "https://" + podinfoModule,
		},
	}, p.Image, p.Archive)
}

// toolsCache is where hack/tools/build.sh keeps the tools; built workloads
// are cached beside them, keyed the same way.
func toolsCache() (string, error) {
	if dir := os.Getenv("FLEEET_TOOLS_CACHE"); dir != "" {
		return dir, nil
	}
	dir, err := os.UserCacheDir()
	return filepath.Join(dir, "fleeet", "tools"), err
}

// ChartDir is podinfo's Helm chart, for NewChartRepo.
func (p *Podinfo) ChartDir() string { return filepath.Join(p.Dir, "charts", "podinfo") }

// TenantRole is what a tenant's ServiceAccount needs, bound in its
// namespace, for Flux to run podinfo there as that tenant: podinfo's
// objects, Helm's release Secrets, and the ReplicaSets and Pods that Flux's
// health checks read.
func (p *Podinfo) TenantRole(name string) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "configmaps", "secrets", "serviceaccounts"}, Verbs: []string{"*"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"*"}},
			{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"autoscaling"}, Resources: []string{"horizontalpodautoscalers"}, Verbs: []string{"*"}},
		},
	}
}

// Kustomize returns podinfo's kustomize directory as files under dir, for
// GitServer.Commit; edit (a file name relative to the directory → its
// content) changes files on the way, such as a Deployment that cannot
// become ready.
func (p *Podinfo) Kustomize(t TB, dir string, edit func(name string, content []byte) []byte) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(p.Dir, "kustomize"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		content, err := os.ReadFile(filepath.Join(p.Dir, "kustomize", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			content = edit(e.Name(), bytes.Clone(content))
		}
		files[strings.TrimPrefix(filepath.Join(dir, e.Name()), "/")] = string(content)
	}
	return files
}
