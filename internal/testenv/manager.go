package testenv

import (
	"context"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// StartManager runs a controller-runtime manager in-process against the
// cluster, with the controllers setup registers, until stop is called. Its
// log goes to a file that stop prints when told the tests failed.
func StartManager(c *Cluster, name string, setup func(context.Context, ctrl.Manager) error) (stop func(failed bool), err error) {
	logFile, err := os.CreateTemp("", name+"-*.log")
	if err != nil {
		return nil, err
	}
	logger := zap.New(zap.WriteTo(logFile), zap.UseDevMode(true))
	// Some parts (the webhook server's certificate watcher) log through
	// the global logger only.
	ctrl.SetLogger(logger)
	opts := ctrl.Options{
		Scheme:                 Scheme,
		Logger:                 logger,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}
	if w := c.Webhooks; w != nil {
		opts.WebhookServer = webhook.NewServer(webhook.Options{Host: w.LocalServingHost, Port: w.LocalServingPort, CertDir: w.LocalServingCertDir})
	}
	mgr, err := ctrl.NewManager(c.Config, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := setup(ctx, mgr); err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
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
