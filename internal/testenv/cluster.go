package testenv

import (
	"context"
	cryptorand "crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fleeet-dev/fleeet/internal/runner"
)

// Scheme knows the kinds the binaries know, plus CRDs.
var Scheme = func() *runtime.Scheme {
	s, err := runner.NewScheme()
	if err == nil {
		err = apiextensionsv1.AddToScheme(s)
	}
	if err != nil {
		panic(err)
	}
	return s
}()

// AdminUser is the cluster admin that processes started with a Cluster's
// Kubeconfig act as; the tests' own Client is another admin.
const AdminUser = "fleeet-test-admin"

// Cluster is a real kube-apiserver backed by its own etcd, with fleeet's and
// Flux's CRDs installed. It plays a management or a downstream cluster.
type Cluster struct {
	// Name says which role the cluster plays in the test, such as "management".
	Name string
	// Config authenticates as a cluster administrator.
	Config *rest.Config
	// Client is an uncached client authenticated as a cluster administrator.
	Client client.Client
	// Kubeconfig is the path of a kubeconfig file for processes, as
	// AdminUser.
	Kubeconfig string
	// Webhooks, for a cluster started WithWebhooks, is where the apiserver
	// expects fleet-manager's admission webhooks (config/webhook) and the
	// certificate to serve them with.
	Webhooks *envtest.WebhookInstallOptions

	env *envtest.Environment
	// nodes, for a cluster started WithNodes, is what its nodes share.
	nodes *nodeSupport
}

// ClusterOption adjusts an apiserver before it starts; dir is the test's
// directory for the cluster's files.
type ClusterOption func(env *envtest.Environment, dir string) error

// WithAuditLog makes the apiserver record every request, with its user, as
// JSON lines in the file at path: the apiserver's own account of who asked
// for what.
func WithAuditLog(path string) ClusterOption {
	return func(env *envtest.Environment, dir string) error {
		policy := filepath.Join(dir, "audit-policy.yaml")
		err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"), 0o600)
		if err != nil {
			return err
		}
		args := env.ControlPlane.APIServer.Configure()
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", path)
		args.Set("audit-log-mode", "blocking")
		return nil
	}
}

// WithoutFleeetCRDs leaves fleeet's own CRDs out, so that a test can install
// them the way users do (with the charts), and adds the CRDs in extra.
func WithoutFleeetCRDs(extra ...string) ClusterOption {
	return func(env *envtest.Environment, _ string) error {
		flux, err := fluxCRDDirectories()
		if err != nil {
			return err
		}
		env.CRDDirectoryPaths = append(append([]string{}, flux...), extra...)
		return nil
	}
}

// WithoutCRDs leaves every CRD out, fleeet's and Flux's, so that a test can
// install them the way users do (the fleet-agent chart brings Flux's), and
// adds the CRDs in extra.
func WithoutCRDs(extra ...string) ClusterOption {
	return func(env *envtest.Environment, _ string) error {
		env.CRDDirectoryPaths = append([]string{}, extra...)
		return nil
	}
}

// WithoutFluxCRDs leaves Flux's CRDs out, as on a cluster the agent comes
// to before Flux: InstallFluxCRDs brings them later.
func WithoutFluxCRDs() ClusterOption {
	return WithoutCRDs(filepath.Join(RepoRoot, "config", "crd", "bases"))
}

// InstallFluxCRDs installs Flux's CRDs into c, which started without them.
func (c *Cluster) InstallFluxCRDs(t TB) {
	t.Helper()
	c.installCRDs(t, "Flux's CRDs", fluxCRDDirectories)
}

// installCRDs installs the CRDs at the paths of find, named what, into c
// while it runs.
func (c *Cluster) installCRDs(t TB, what string, find func() ([]string, error)) {
	t.Helper()
	paths, err := find()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{Paths: paths}); err != nil {
		t.Fatalf("installing %s into %s: %v", what, c.Name, err)
	}
}

// WithWebhooks registers the fleet-manager's admission webhooks
// (config/webhook) in the apiserver, served at an address and with a
// certificate the Cluster's Webhooks field gives. Every write to a
// management kind then needs a running manager.
func WithWebhooks() ClusterOption {
	return func(env *envtest.Environment, _ string) error {
		env.WebhookInstallOptions.Paths = []string{filepath.Join(RepoRoot, "config", "webhook")}
		return nil
	}
}

// StartCluster starts one apiserver and stops it when the test ends.
func StartCluster(t TB, name string, opts ...ClusterOption) *Cluster {
	t.Helper()
	c, err := startCluster(name, t.TempDir(), opts...)
	stopAtEnd(t, name, c, err)
	return c
}

// stopAtEnd stops a started apiserver when the test ends, and fails the
// test if starting it failed.
func stopAtEnd(t TB, name string, c *Cluster, err error) {
	t.Helper()
	if c != nil {
		t.Cleanup(func() {
			if err := c.stop(t.Failed()); err != nil {
				t.Errorf("stopping %s apiserver: %v", c.Name, err)
			}
		})
	}
	if unsupported := (*nodesUnsupportedError)(nil); errors.As(err, &unsupported) {
		skip(t, err.Error())
	}
	if err != nil {
		t.Fatalf("starting %s apiserver: %v", name, err)
	}
}

// StartClusters starts one apiserver per name, concurrently, each with opts,
// and stops them when the test ends. Two names give a management and a
// downstream cluster.
func StartClusters(t TB, names []string, opts ...ClusterOption) []*Cluster {
	t.Helper()
	clusters := make([]*Cluster, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		dir := t.TempDir()
		wg.Go(func() { clusters[i], errs[i] = startCluster(name, dir, opts...) })
	}
	wg.Wait()
	for i, c := range clusters {
		stopAtEnd(t, names[i], c, errs[i])
	}
	return clusters
}

// startCluster starts an apiserver whose admin kubeconfig is written into dir.
func startCluster(name, dir string, opts ...ClusterOption) (*Cluster, error) {
	crdDirs, err := crdDirectories()
	if err != nil {
		return nil, err
	}
	apiserver, err := tool("kube-apiserver")
	if err != nil {
		return nil, err
	}
	etcd, err := tool("etcd")
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, name+"-apiserver")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	// A fixed certificate directory keeps the serving CA and the
	// service-account signing key across StopAPIServer/StartAPIServer.
	api := &envtest.APIServer{Path: apiserver, CertDir: certDir}
	// Stopped, the apiserver otherwise waits up to its request timeout (a
	// minute) for the watches of clients still attached, such as a
	// manager's; with this it answers new requests 429 until those in
	// flight are done, then closes every connection within 2 s.
	api.Configure().Set("shutdown-send-retry-after", "true")
	env := &envtest.Environment{
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme,
		ControlPlane: envtest.ControlPlane{
			APIServer: api,
			Etcd:      &envtest.Etcd{Path: etcd},
		},
		// On two busy cores an apiserver, started or started again (a
		// fault, a new signing key), can take longer than the default
		// 20 s to answer; one with clients attached longer than that to
		// shut down gracefully.
		ControlPlaneStartTimeout: time.Minute,
		ControlPlaneStopTimeout:  2 * time.Minute,
	}
	for _, opt := range opts {
		if err := opt(env, dir); err != nil {
			return nil, err
		}
	}

	cfg, err := env.Start()
	nodes, withNodes := nodeClusters.LoadAndDelete(env)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: name, Config: cfg, env: env}
	if withNodes {
		c.nodes = nodes.(*nodeSupport)
	}
	if len(env.WebhookInstallOptions.Paths) > 0 {
		c.Webhooks = &env.WebhookInstallOptions
		// The webhook server listens only once a manager runs: until then
		// FreeAddr must not hand its port out again.
		handedOut.Store(net.JoinHostPort(c.Webhooks.LocalServingHost, strconv.Itoa(c.Webhooks.LocalServingPort)), true)
	}
	if c.Client, err = client.New(cfg, client.Options{Scheme: Scheme}); err != nil {
		return c, err
	}
	admin, err := env.AddUser(envtest.User{Name: AdminUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return c, err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return c, err
	}
	c.Kubeconfig = filepath.Join(dir, name+".kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig, 0o600); err != nil {
		return c, err
	}
	if c.nodes != nil {
		return c, c.startNodeControlPlane(dir)
	}
	return c, nil
}

// stop stops what startCluster started; failed says whether to print the
// logs of the cluster's controllers.
func (c *Cluster) stop(failed bool) error {
	if c.nodes != nil {
		c.nodes.stop(failed)
	}
	return c.env.Stop()
}

func crdDirectories() ([]string, error) {
	flux, err := fluxCRDDirectories()
	if err != nil {
		return nil, err
	}
	return append([]string{filepath.Join(RepoRoot, "config", "crd", "bases")}, flux...), nil
}

// StopAPIServer stops the apiserver process, leaving etcd and everything
// stored running, so clients see the cluster go away; StartAPIServer brings
// it back on the same address with the same certificates and keys.
func (c *Cluster) StopAPIServer() error { return c.env.ControlPlane.APIServer.Stop() }

// StartAPIServer restarts an apiserver stopped with StopAPIServer.
func (c *Cluster) StartAPIServer() error { return c.env.ControlPlane.APIServer.Start() }

// FreezeEtcd stops the cluster's etcd process (SIGSTOP) for d, then lets it
// go on (SIGCONT): the apiserver stays up while every request that reaches
// storage hangs and times out, as on a stalled disk or an etcd cut off,
// and nothing stored is lost. It returns early, letting etcd go on, when
// ctx ends.
func (c *Cluster) FreezeEtcd(ctx context.Context, d time.Duration) error {
	pids := processesMentioning("--listen-client-urls=" + c.env.ControlPlane.Etcd.URL.String() + "\x00")
	if len(pids) != 1 {
		return fmt.Errorf("finding %s etcd: %d processes listen at %s", c.Name, len(pids), c.env.ControlPlane.Etcd.URL)
	}
	if err := syscall.Kill(pids[0], syscall.SIGSTOP); err != nil {
		return fmt.Errorf("freezing %s etcd: %w", c.Name, err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	if err := syscall.Kill(pids[0], syscall.SIGCONT); err != nil {
		return fmt.Errorf("thawing %s etcd: %w", c.Name, err)
	}
	return nil
}

// EtcdMetricsURL is where the cluster's etcd serves its Prometheus metrics,
// its database size among them.
func (c *Cluster) EtcdMetricsURL() string {
	return c.env.ControlPlane.Etcd.URL.JoinPath("metrics").String()
}

// RotateServiceAccountKey restarts the apiserver with a new
// service-account signing key, on the same address, with the same serving
// CA and the same etcd: every ServiceAccount token issued before is
// rejected from then on, as after a key rotation on a real management
// cluster. Clients authenticated otherwise (the test's admin) are not.
func (c *Cluster) RotateServiceAccountKey(t TB) {
	t.Helper()
	c.restart(t, false)
}

// Replace stands a new cluster up in the place of c, as after losing a
// management cluster: empty etcd, a new service-account signing key, the
// same address and serving CA, the CRDs installed again. Webhook
// configurations and nodes are not brought back.
func (c *Cluster) Replace(t TB) {
	t.Helper()
	c.restart(t, true)
	if _, err := envtest.InstallCRDs(c.Config, c.env.CRDInstallOptions); err != nil {
		t.Fatalf("installing CRDs into the new %s cluster: %v", c.Name, err)
	}
}

// restart stops the apiserver and starts it again with a new
// service-account signing key; wipe starts etcd over empty in between.
func (c *Cluster) restart(t TB, wipe bool) {
	t.Helper()
	if err := c.StopAPIServer(); err != nil {
		t.Fatalf("stopping %s apiserver: %v", c.Name, err)
	}
	if wipe {
		// envtest made etcd's data directory, so it removes it on stop
		// and makes a new one on start, on the same address.
		etcd := c.env.ControlPlane.Etcd
		if err := etcd.Stop(); err != nil {
			t.Fatalf("stopping %s etcd: %v", c.Name, err)
		}
		if err := etcd.Start(); err != nil {
			t.Fatalf("starting %s etcd: %v", c.Name, err)
		}
	}
	key, err := rsa.GenerateKey(cryptorand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	public, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	// The file names envtest starts the apiserver with.
	dir := c.env.ControlPlane.APIServer.CertDir
	files := map[string]*pem.Block{
		"sa-signer.key": {Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)},
		"sa-signer.crt": {Type: "PUBLIC KEY", Bytes: public},
	}
	for name, block := range files {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.StartAPIServer(); err != nil {
		t.Fatalf("starting %s apiserver with a new service-account key: %v", c.Name, err)
	}
}

// Namespace creates a namespace with a random name derived from prefix and
// the given labels. Tests use one namespace each; namespaces are not deleted
// because no namespace controller runs to finalize them.
func (c *Cluster) Namespace(t TB, prefix string, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   fmt.Sprintf("%s-%s", prefix, rand.String(5)),
		Labels: labels,
	}}
	if err := c.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace in %s: %v", c.Name, err)
	}
	return ns.Name
}

// RunWithCluster starts one apiserver shared by every test of a package,
// runs each setup against it (a setup returns how to stop what it started,
// told whether the tests failed), runs the tests and stops everything; use it
// from TestMain as os.Exit(testenv.RunWithCluster(m, "management", &cluster)).
func RunWithCluster(m *testing.M, name string, c **Cluster, opts []ClusterOption, setups ...func(*Cluster) (stop func(failed bool), err error)) (code int) {
	bound := make([]func() (func(bool), error), len(setups))
	for i, setup := range setups {
		bound[i] = func() (func(bool), error) { return setup(*c) }
	}
	return RunWithClusters(m, []SharedCluster{{Name: name, Cluster: c, Options: opts}}, bound...)
}

// SharedCluster is one apiserver RunWithClusters starts for every test of a
// package: the role it plays, the variable the tests find it in, and the
// options it starts with.
type SharedCluster struct {
	// Name is the cluster's role, such as "downstream".
	Name string
	// Cluster is where the started cluster is stored for the tests.
	Cluster **Cluster
	// Options adjust this cluster's apiserver before it starts.
	Options []ClusterOption
}

// RunWithClusters starts the clusters, concurrently, shared by every test of
// a package; then it runs each setup, runs the tests as Run does and stops
// everything.
// Tests sharing clusters keep apart by working in namespaces of their own.
// Use it from TestMain as os.Exit(testenv.RunWithClusters(m,
// []testenv.SharedCluster{{Name: "management", Cluster: &mgmt}, {Name: "downstream", Cluster: &down}})).
func RunWithClusters(m *testing.M, clusters []SharedCluster, setups ...func() (stop func(failed bool), err error)) (code int) {
	dir, err := os.MkdirTemp("", "fleeet-testenv-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i, sc := range clusters {
		wg.Go(func() { *sc.Cluster, errs[i] = startCluster(sc.Name, filepath.Join(dir, sc.Name), sc.Options...) })
	}
	wg.Wait()
	for _, sc := range clusters {
		if c := *sc.Cluster; c != nil {
			defer func() {
				if err := c.stop(code != 0); err != nil {
					fmt.Fprintf(os.Stderr, "stopping %s apiserver: %v\n", sc.Name, err)
				}
			}()
		}
	}
	for i, sc := range clusters {
		if unsupported := (*nodesUnsupportedError)(nil); errors.As(errs[i], &unsupported) {
			fmt.Fprintf(os.Stderr, "skipping every test: %v\n", errs[i])
			return 0
		}
		if errs[i] != nil {
			fmt.Fprintf(os.Stderr, "starting %s apiserver: %v\n", sc.Name, errs[i])
			return 1
		}
	}
	for _, setup := range setups {
		stop, err := setup()
		if err != nil {
			fmt.Fprintf(os.Stderr, "setting up the tests: %v\n", err)
			return 1
		}
		defer func() { stop(code != 0) }()
	}
	return Run(m)
}

// WatchUntil watches the objects of list's kind in namespace of c and hands
// each event to handle until it returns true. It starts with every existing
// object (as Added); a watch the apiserver ends (it closes watchers that fall
// behind) resumes after the last event seen, or starts over when that is too
// old. It fails t, saying it was waiting for what, when timeout passes first.
func WatchUntil(t TB, c *Cluster, list client.ObjectList, namespace string, timeout time.Duration, what string, handle func(watch.Event) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	wc, err := client.NewWithWatch(c.Config, client.Options{Scheme: Scheme})
	if err != nil {
		t.Fatal(err)
	}
	resume := ""
	for ctx.Err() == nil {
		var done bool
		if resume, done, err = watchFrom(ctx, wc, list, namespace, resume, handle); err != nil {
			t.Fatal(err)
		}
		if done {
			return
		}
	}
	t.Fatalf("waiting for %s: %v", what, ctx.Err())
}

// Follow hands every event of the objects of list's kind in namespace of c
// to handle until ctx ends, as WatchUntil does, and goes on trying every
// second while the apiserver cannot be reached (a test stopped it).
func Follow(ctx context.Context, c *Cluster, list client.ObjectList, namespace string, handle func(watch.Event)) {
	wc, err := client.NewWithWatch(c.Config, client.Options{Scheme: Scheme})
	if err != nil {
		return
	}
	resume := ""
	for ctx.Err() == nil {
		if resume, _, err = watchFrom(ctx, wc, list, namespace, resume, func(ev watch.Event) bool { handle(ev); return false }); err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// watchFrom watches from resume until the watch ends or handle returns
// true (done), and returns the resource version to resume from: the last
// event's, or "" when the apiserver no longer has it.
func watchFrom(ctx context.Context, wc client.WithWatch, list client.ObjectList, namespace, resume string, handle func(watch.Event) bool) (string, bool, error) {
	w, err := wc.Watch(ctx, list, client.InNamespace(namespace), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resume}})
	if err != nil {
		return resume, false, err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			if err := apierrors.FromObject(ev.Object); apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				resume = ""
			}
			continue
		}
		if o, ok := ev.Object.(client.Object); ok {
			resume = o.GetResourceVersion()
		}
		if handle(ev) {
			return resume, true, nil
		}
	}
	return resume, false, nil
}
