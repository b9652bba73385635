package inventory_test

import (
	"context"
	"os"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/inventory"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/remote"
	"github.com/fleeet-dev/fleeet/internal/manager"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
	// deployer is the manager's default spec.serviceAccountName for
	// enrolled Remotes.
	deployer = "deployer"
)

// cluster is the management apiserver every test of the package shares,
// serving Cluster API's and the ClusterProfile CRDs, with the controllers
// that carry a Module to a push Remote and the inventory controller
// running. It also plays the downstream cluster the inventories point at:
// the manager reaches it through the kubeconfigs the tests put in the
// inventories' Secrets, as it would reach any other.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, []testenv.ClusterOption{testenv.WithInventoryCRDs()}, func(c *testenv.Cluster) (func(bool), error) {
		return testenv.StartManager(c, "inventory", setupInventory, func(o *ctrl.Options) { o.NewCache = secrets.NewCache })
	}))
}

// setupInventory registers the controllers as the manager does, bar
// registration and admission.
func setupInventory(ctx context.Context, mgr ctrl.Manager) error {
	if err := manager.SetupModules(ctx, mgr, manager.Options{Concurrent: 2, OfflineGrace: time.Minute}); err != nil {
		return err
	}
	push := &remote.PushReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(manager.Name), Timeout: 5 * time.Second, Poll: time.Second, Concurrent: 2}
	if err := push.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	return (&inventory.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(manager.Name), Concurrent: 2,
		ServiceAccountName: deployer, AccessProvider: "secretreader",
		// An inventory installed later is seen within seconds, not the
		// production minute.
		Poll: 2 * time.Second}).SetupWithManager(mgr)
}

// tenant returns a fresh tenant namespace.
func tenant(t *testing.T) string {
	return cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
}
