package testenv

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// certManagerNamespace is where cert-manager keeps the Secrets of
// ClusterIssuers, as a cert-manager installation does.
const certManagerNamespace = "cert-manager"

// StartCertManager runs cert-manager's controller and cainjector against the
// cluster, as one process with cluster-admin rights (hack/tools/cert-manager:
// cert-manager's own controllers and injectors, built from the pinned
// module), and waits until both watch the cluster. The cluster needs
// cert-manager's CRDs: start it WithoutFleeetCRDs(CertManagerCRDDirectory()).
func StartCertManager(t TB, c *Cluster) *Process {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: certManagerNamespace}}
	if err := c.Client.Create(t.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating %s namespace: %v", certManagerNamespace, err)
	}
	path, err := tool("cert-manager")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// As for Flux: a port found free can be taken before the process binds
	// it; the process then exits, and starts again on another.
	for attempt := 1; ; attempt++ {
		health := FreeAddr(t)
		p := StartProcess(t, c.Name+"-cert-manager", path, nil,
			"--kubeconfig="+c.Kubeconfig,
			"--cluster-resource-namespace="+certManagerNamespace,
			"--health-addr="+health,
			"--v=2",
		)
		err := p.WaitHTTP(ctx, "http://"+health+"/readyz")
		if err == nil {
			return p
		}
		if exited, _ := p.Exited(); !exited || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("cert-manager exited while starting, trying another port: %v", err)
	}
}
