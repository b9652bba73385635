// Package runner holds what fleeet's controller binaries share: the flags
// every one of them takes and the controller-runtime manager built from them,
// serving health and metrics endpoints and stopping cleanly on SIGTERM.
package runner

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"golang.org/x/time/rate"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/ratelimit"
	"github.com/fleeet-dev/fleeet/internal/version"
)

// options are the flags common to fleet-manager and fleet-agent.
type options struct {
	// MetricsAddr is where Prometheus metrics are served; "0" disables them.
	MetricsAddr string
	// MetricsSecure serves metrics over HTTPS to callers the apiserver
	// authenticates (TokenReview) and authorises for a GET of /metrics
	// (SubjectAccessReview). Off, anyone who reaches the port reads every
	// tenant's namespace, Module and Remote names and rollout states.
	MetricsSecure bool
	// MetricsCertDir holds the metrics serving certificate as tls.crt and
	// tls.key; empty, or without them, a self-signed one is made at start.
	MetricsCertDir string
	// HealthAddr is where /healthz and /readyz are served.
	HealthAddr string
	// PprofAddr is where Go's pprof profiles are served; empty disables them.
	PprofAddr string
	// LeaderElect makes only one replica reconcile at a time.
	LeaderElect bool
	// LeaderElectionNamespace holds the leader Lease; defaults to the
	// in-cluster namespace.
	LeaderElectionNamespace string
	// LeaseDuration is how long standby replicas wait after the leader's
	// last renewal before taking the Lease: the longest a leader that died
	// without stepping down leaves the fleet unreconciled. RenewDeadline is
	// how long the leader keeps trying to renew before it stops leading,
	// and RetryPeriod how often every replica tries to take or renew it.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// KubeAPIQPS is the sustained rate, in requests per second, the binary
	// sends to its apiserver, and KubeAPIBurst how many requests may go at
	// once above that rate.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// Zap configures structured logging.
	Zap zap.Options
}

// BindFlags registers the options on fs with the defaults the charts expect.
func (o *options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080",
		`Address the Prometheus metrics endpoint binds to; "0" disables it.`)
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS only to callers the Kubernetes API authenticates and authorises for a GET of /metrics. "+
			"false serves them over plain HTTP to anyone who reaches the port, tenant names and rollout states included.")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "",
		"Directory holding the metrics serving certificate as tls.crt and tls.key; empty serves a self-signed one.")
	fs.StringVar(&o.HealthAddr, "health-probe-bind-address", ":8081",
		"Address the /healthz and /readyz endpoints bind to.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "",
		"Address Go's pprof profiling endpoints bind to, for diagnosing CPU and memory use; empty disables them.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false,
		"Elect a leader so only one replica reconciles at a time.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election Lease; defaults to the pod's namespace.")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", 15*time.Second,
		"How long standby replicas wait after the leader's last renewal before taking over: the longest a leader that died without stepping down leaves rollouts unattended.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", 10*time.Second,
		"How long the leader keeps trying to renew its Lease before it stops leading; shorter than --leader-election-lease-duration.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", 2*time.Second,
		"How often each replica tries to take or renew the leader Lease.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", 100,
		"Requests per second to the Kubernetes API, sustained.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", 300,
		"Requests to the Kubernetes API that may go at once above --kube-api-qps.")
}

// validateLeaderElection refuses lease timings client-go's leader election
// would reject only once the manager starts, naming the flags: the leader
// must give up (renew deadline) before standbys may take over (lease
// duration), and must get more than one try at renewing within its deadline.
func (o *options) validateLeaderElection() error {
	if !o.LeaderElect {
		return nil
	}
	if o.RetryPeriod <= 0 {
		return fmt.Errorf("--leader-election-retry-period=%s: must be positive", o.RetryPeriod)
	}
	if o.RenewDeadline >= o.LeaseDuration {
		return fmt.Errorf("--leader-election-renew-deadline=%s: must be shorter than --leader-election-lease-duration=%s", o.RenewDeadline, o.LeaseDuration)
	}
	if o.RenewDeadline <= o.RetryPeriod*12/10 {
		return fmt.Errorf("--leader-election-retry-period=%s: must be shorter than --leader-election-renew-deadline=%s by more than a fifth of itself", o.RetryPeriod, o.RenewDeadline)
	}
	return nil
}

// NewScheme returns a scheme holding the Kubernetes built-in kinds, fleeet's
// and the Flux kinds syncs expand into.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, fleeetv1.AddToScheme,
		sourcev1.AddToScheme, kustomizev1.AddToScheme, helmv2.AddToScheme,
		// CustomResourceDefinitions are read, by name, for Flux's versions.
		apiextensionsv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// newManager builds a controller-runtime manager for the binary called name,
// with health and readiness checks registered, from the kubeconfig given by
// --kubeconfig, $KUBECONFIG or the in-cluster environment; configure may
// adjust the manager's options, for example to serve webhooks.
func newManager(name string, o options, scheme *runtime.Scheme, configure ...func(*ctrl.Options)) (ctrl.Manager, error) {
	if err := o.validateLeaderElection(); err != nil {
		return nil, err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.UserAgent = name
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	opts := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOptions(o),
		HealthProbeBindAddress:  o.HealthAddr,
		PprofBindAddress:        o.PprofAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        name + ".fleeet.dev",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		LeaseDuration:           &o.LeaseDuration,
		RenewDeadline:           &o.RenewDeadline,
		RetryPeriod:             &o.RetryPeriod,
		// Step down at once on SIGTERM so a rolling update hands over quickly.
		LeaderElectionReleaseOnCancel: true,
	}
	for _, c := range configure {
		c(&opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding readiness check: %w", err)
	}
	return mgr, nil
}

// metricsOptions serve metrics as o asks: with MetricsSecure, over HTTPS
// behind the apiserver's authentication and authorisation, each caller's
// bearer token checked with a TokenReview and its right to GET /metrics with
// a SubjectAccessReview (both cached briefly by controller-runtime), and
// each client's requests bounded first (limitMetrics).
func metricsOptions(o options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		m.SecureServing = true
		m.FilterProvider = limitedMetricsAuth
		m.CertDir = o.MetricsCertDir
	}
	return m
}

// Anyone who reaches the metrics port can make each request with a new
// made-up token cost the apiserver a TokenReview. These limits bound the
// requests one client address, and every client together, may make; a
// Prometheus scrapes each target every 15 to 60 s.
const (
	metricsPerClient      = rate.Limit(1)
	metricsBurstPerClient = 10
	metricsInAll          = rate.Limit(20)
	metricsBurstInAll     = 50
	maxMetricsClients     = 10000
)

// limitedMetricsAuth is controller-runtime's authentication and
// authorisation filter behind limitMetrics.
func limitedMetricsAuth(c *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
	authorize, err := filters.WithAuthenticationAndAuthorization(c, hc)
	if err != nil {
		return nil, err
	}
	limits := ratelimit.NewShared(metricsPerClient, metricsBurstPerClient, metricsInAll, metricsBurstInAll, maxMetricsClients)
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		h, err := authorize(log, next)
		if err != nil {
			return nil, err
		}
		return limitMetrics(limits, time.Now, h), nil
	}, nil
}

// limitMetrics answers 429, with Retry-After, a request its client address
// (the peer's) or every client together has no allowance left for, before
// next spends a TokenReview on its token.
func limitMetrics(limits *ratelimit.Shared, now func() time.Time, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			client = r.RemoteAddr
		}
		if wait := limits.Allow(client, now()); wait > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(ratelimit.RetrySeconds(wait)))
			http.Error(w, "too many requests to the metrics endpoint from this client", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Main is the whole life of a controller binary: it parses the command line
// (binary-specific flags are registered on pflag.CommandLine before calling
// it), builds the manager, lets setup add controllers and webhooks, and runs
// until SIGTERM or SIGINT. It exits the process: 0 after a clean stop, 1 on
// any setup or run error.
func Main(name string, setup func(ctrl.Manager) error, configure ...func(*ctrl.Options)) {
	var o options
	o.BindFlags(pflag.CommandLine)
	o.Zap.BindFlags(flag.CommandLine)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine)
	pflag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.Zap)))
	log := ctrl.Log.WithName("setup")
	if err := run(name, o, setup, configure); err != nil {
		log.Error(err, "Stopping on error", "binary", name)
		os.Exit(1)
	}
	log.Info("Stopped", "binary", name)
}

func run(name string, o options, setup func(ctrl.Manager) error, configure []func(*ctrl.Options)) error {
	scheme, err := NewScheme()
	if err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	mgr, err := newManager(name, o, scheme, configure...)
	if err != nil {
		return err
	}
	if setup != nil {
		if err := setup(mgr); err != nil {
			return fmt.Errorf("setting up %s: %w", name, err)
		}
	}
	ctrl.Log.WithName("setup").Info("Starting", "binary", name, "version", version.Version,
		"metrics-bind-address", o.MetricsAddr, "metrics-secure", o.MetricsSecure, "health-probe-bind-address", o.HealthAddr)
	return mgr.Start(ctrl.SetupSignalHandler())
}
