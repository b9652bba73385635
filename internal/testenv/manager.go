package testenv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// StartManager runs a controller-runtime manager in-process against the
// cluster, with the controllers setup registers, until stop is called, and
// returns once its readiness checks pass (the fleet-manager's, for one,
// refuses admission until its user policies are loaded). Its log goes to a
// file that stop prints when told the tests failed. Each configure adjusts the
// manager's options, as the binaries' own do (an agent's cache confined to
// its namespaces, for one).
func StartManager(c *Cluster, name string, setup func(context.Context, ctrl.Manager) error, configure ...func(*ctrl.Options)) (stop func(failed bool), err error) {
	logFile, err := os.CreateTemp("", name+"-*.log")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	health := net.JoinHostPort("127.0.0.1", port)
	logger := zap.New(zap.WriteTo(logFile), zap.UseDevMode(true))
	// Some parts (the webhook server's certificate watcher) log through
	// the global logger only.
	ctrl.SetLogger(logger)
	opts := ctrl.Options{
		Scheme:                 Scheme,
		Logger:                 logger,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: health,
		// One test binary starts the same controllers once per test (and
		// again under -count=N), which their metric names would otherwise
		// refuse.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	for _, adjust := range configure {
		adjust(&opts)
	}
	if w := c.Webhooks; w != nil {
		opts.WebhookServer = webhook.NewServer(webhook.Options{Host: w.LocalServingHost, Port: w.LocalServingPort, CertDir: w.LocalServingCertDir})
	}
	mgr, err := ctrl.NewManager(c.Config, opts)
	if err != nil {
		return nil, err
	}
	// Served even when setup adds no check of its own.
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := setup(ctx, mgr); err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if err := waitReady(ctx, "http://"+health+"/readyz", done); err != nil {
		cancel()
		logFile.Close()
		return nil, fmt.Errorf("%s: %w\n%s", name, err, Tail(logFile.Name(), 40))
	}
	return func(failed bool) {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		}
		logFile.Close()
		if failed {
			fmt.Fprintf(os.Stderr, "last lines of the %s log (%s):\n%s\n", name, logFile.Name(), Tail(logFile.Name(), 60))
			return
		}
		os.Remove(logFile.Name())
	}, nil
}

// RunManager is StartManager for the duration of one test.
func RunManager(t TB, c *Cluster, name string, setup func(context.Context, ctrl.Manager) error) {
	t.Helper()
	stop, err := StartManager(c, name, setup)
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() { stop(t.Failed()) })
}

// StartManagerProcess runs the fleet-manager binary at bin against c, as
// the chart would (management URL and CA for RegistrationToken Secrets,
// webhooks served where c's webhook configuration points), with args
// appended (a later flag wins), and waits until it is ready.
func StartManagerProcess(t TB, bin string, c *Cluster, args ...string) *Process {
	t.Helper()
	return StartManagerProcessAs(t, bin, c, c.Kubeconfig, args...)
}

// StartManagerProcessAs is StartManagerProcess authenticating with the
// kubeconfig at kubeconfig (see ManagerServiceAccount).
func StartManagerProcessAs(t TB, bin string, c *Cluster, kubeconfig string, args ...string) *Process {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, c.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	health := FreeAddr(t)
	flags := []string{"--health-probe-bind-address=" + health, "--metrics-bind-address=0",
		"--management-url=" + c.Config.Host, "--management-ca-file=" + ca,
		"--webhook-cert-dir=" + c.Webhooks.LocalServingCertDir, "--webhook-host=" + c.Webhooks.LocalServingHost,
		fmt.Sprintf("--webhook-port=%d", c.Webhooks.LocalServingPort)}
	p := StartProcess(t, "fleet-manager", bin, []string{"KUBECONFIG=" + kubeconfig}, append(flags, args...)...)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := p.WaitHTTP(ctx, "http://"+health+"/readyz"); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitReady polls url until it answers 200, the manager stops (done) or a
// minute passes.
func waitReady(ctx context.Context, url string, done <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-done:
			return fmt.Errorf("stopped before it was ready: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("not ready at %s: %w", url, ctx.Err())
		case <-tick.C:
		}
	}
}

// ManagerServiceAccount makes the ServiceAccount namespace/fleet-manager
// in c, where the chart would run the manager, bound to cluster-admin, and
// returns a kubeconfig of an hour's token of it: a manager run with it is
// the identity the webhook's match conditions name, so its plan writes
// are judged in process only, as in a cluster the chart installed.
func ManagerServiceAccount(t TB, c *Cluster, namespace string) string {
	t.Helper()
	ctx := t.Context()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "fleet-manager"}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-manager-" + namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: sa.Name}}}
	for _, o := range []client.Object{sa, binding} {
		if err := c.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	return serviceAccountKubeconfig(t, c, namespace, sa.Name)
}
