package testenv

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleeet-dev/fleeet/internal/ociimage"
)

// fluxNamespace is where the Flux controllers think they run.
const fluxNamespace = "flux-system"

// FluxController names one of the Flux controllers the tests run.
type FluxController string

// The Flux controllers fleeet expands syncs into.
const (
	SourceController    FluxController = "source-controller"
	KustomizeController FluxController = "kustomize-controller"
	HelmController      FluxController = "helm-controller"
)

// FluxOptions are the flags StartFluxWith gives the Flux controllers beyond
// the ones every test needs.
type FluxOptions struct {
	// RequeueDependency is kustomize- and helm-controller's
	// --requeue-dependency: how soon an object whose dependsOn is not ready
	// is checked again. Zero keeps Flux's default, 30s.
	RequeueDependency time.Duration
	// WatchLabelSelector is --watch-label-selector: the controllers reconcile
	// only the objects it selects, as Flux's own sharding does. Empty
	// selects every object.
	WatchLabelSelector string
}

// StartFlux runs the given Flux controllers as processes against the cluster,
// with cluster-admin rights, and waits until each reports ready. The source
// controller serves artifacts on loopback for the others.
func StartFlux(t TB, c *Cluster, controllers ...FluxController) map[FluxController]*Process {
	t.Helper()
	return StartFluxWith(t, c, FluxOptions{}, controllers...)
}

// StartFluxWith is StartFlux with the flags o sets. Two sets of controllers
// can share a cluster when their WatchLabelSelectors select disjoint
// objects.
func StartFluxWith(t TB, c *Cluster, o FluxOptions, controllers ...FluxController) map[FluxController]*Process {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fluxNamespace}}
	if err := c.Client.Create(t.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating %s namespace: %v", fluxNamespace, err)
	}
	env := []string{"KUBECONFIG=" + c.Kubeconfig, "RUNTIME_NAMESPACE=" + fluxNamespace}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	procs := map[FluxController]*Process{}
	for _, fc := range controllers {
		path, err := tool(string(fc))
		if err != nil {
			t.Fatal(err)
		}
		// A port FreeAddr found free can be taken (by any outgoing
		// connection) before the controller binds it; the controller then
		// exits, and starts again on other ports.
		for attempt := 1; ; attempt++ {
			p, err := startFluxController(ctx, t, c, fc, path, env, o)
			if err == nil {
				procs[fc] = p
				break
			}
			if exited, _ := p.Exited(); !exited || attempt == 3 {
				t.Fatal(err)
			}
			t.Logf("%s exited while starting, trying other ports: %v", fc, err)
		}
	}
	return procs
}

// startFluxController starts one controller on fresh loopback ports and
// waits until it is ready and, for the source controller, until its
// artifact server accepts connections.
func startFluxController(ctx context.Context, t TB, c *Cluster, fc FluxController, path string, env []string, o FluxOptions) (*Process, error) {
	health := FreeAddr(t)
	args := []string{
		"--enable-leader-election=false",
		"--metrics-addr=" + FreeAddr(t),
		"--health-addr=" + health,
		"--log-level=debug",
		"--concurrent=4",
	}
	if o.RequeueDependency != 0 && fc != SourceController {
		args = append(args, "--requeue-dependency="+o.RequeueDependency.String())
	}
	if o.WatchLabelSelector != "" {
		args = append(args, "--watch-label-selector="+o.WatchLabelSelector)
	}
	storage := ""
	if fc == SourceController {
		storage = FreeAddr(t)
		args = append(args,
			"--storage-path="+t.TempDir(),
			"--storage-addr="+storage,
			"--storage-adv-addr="+storage,
		)
	}
	p := StartProcess(t, c.Name+"-"+string(fc), path, env, args...)
	if err := p.WaitHTTP(ctx, "http://"+health+"/readyz"); err != nil {
		return p, err
	}
	if storage == "" {
		return p, nil
	}
	// The artifact server starts after readiness; a taken port shows as
	// the process exiting.
	return p, p.WaitHTTP(ctx, "http://"+storage+"/")
}

// FluxImages returns OCI archives of the given Flux controllers' images, for
// Node.ImportImage, named as Flux publishes them
// (ghcr.io/fluxcd/<controller>:<version>), which is what the fleet-agent
// chart's flux subchart runs by default. Each is built from the controller's
// Go module at the version pinned in hack/tools (static, CGO_ENABLED=0: the
// same tagged source as Flux's image, not its bytes) with the CA bundle of
// this machine, once per tools cache (a few minutes cold).
func FluxImages(t TB, controllers ...FluxController) map[FluxController]string {
	t.Helper()
	cache, err := toolsCache()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(ociimage.CABundle)
	if err != nil {
		t.Fatalf("reading the CA bundle the Flux images carry: %v", err)
	}
	tools := filepath.Join(RepoRoot, "hack", "tools")
	archives := map[FluxController]string{}
	for _, fc := range controllers {
		module := "github.com/fluxcd/" + string(fc)
		version, err := runIn(tools, "go", "list", "-m", "-f", "{{.Version}}", module)
		if err != nil {
			t.Fatal(err)
		}
		version = strings.TrimSpace(version)
		archive := filepath.Join(cache, "flux-images", string(fc), version, string(fc)+".oci.tar")
		if _, err := os.Stat(archive); err != nil {
			if err := buildFluxImage(t.Context(), tools, module, version, ca, archive); err != nil {
				t.Fatalf("building the %s image: %v", fc, err)
			}
		}
		archives[fc] = archive
	}
	return archives
}

// buildFluxImage builds one controller's image into archive.
func buildFluxImage(ctx context.Context, tools, module, version string, ca []byte, archive string) error {
	bin, err := ociimage.GoBinary(ctx, tools, module, "")
	if err != nil {
		return err
	}
	name := path.Base(module)
	return cacheImage(ociimage.Spec{
		Name:     name,
		Binary:   bin,
		CABundle: ca,
		Created:  time.Unix(0, 0).UTC(),
		Annotations: map[string]string{
			"org.opencontainers.image.title":   name,
			"org.opencontainers.image.version": version,
			"org.opencontainers.image.source":  "https://" + module,
		},
	}, "ghcr.io/fluxcd/"+name+":"+version, archive)
}
