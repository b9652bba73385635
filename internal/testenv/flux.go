package testenv

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// StartFlux runs the given Flux controllers as processes against the cluster,
// with cluster-admin rights, and waits until each reports ready. The source
// controller serves artifacts on loopback for the others.
func StartFlux(t TB, c *Cluster, controllers ...FluxController) map[FluxController]*Process {
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
			p, err := startFluxController(ctx, t, c, fc, path, env)
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
func startFluxController(ctx context.Context, t TB, c *Cluster, fc FluxController, path string, env []string) (*Process, error) {
	health := FreeAddr(t)
	args := []string{
		"--enable-leader-election=false",
		"--metrics-addr=" + FreeAddr(t),
		"--health-addr=" + health,
		"--log-level=debug",
		"--concurrent=4",
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
