// Package manager wires the fleet-manager's controllers into a
// controller-runtime manager, for the binary and for tests alike.
package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/bootstrap"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/compiler"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/content"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/inventory"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/module"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/policyconfig"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/registration"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/remote"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/versions"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/fleetmetrics"
	"github.com/fleeet-dev/fleeet/internal/kubeconfig"
	"github.com/fleeet-dev/fleeet/internal/network"
	"github.com/fleeet-dev/fleeet/internal/policy"
	"github.com/fleeet-dev/fleeet/internal/promquery"
	"github.com/fleeet-dev/fleeet/internal/recovery"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/shard"
	"github.com/fleeet-dev/fleeet/internal/version"
	"github.com/fleeet-dev/fleeet/internal/webhooks"
)

// Name is the fleet-manager's name as a field manager, event source and
// leader election identity.
const Name = "fleet-manager"

// Options configure the fleet-manager's controllers.
type Options struct {
	// OfflineGrace is how long after its last heartbeat (or the manager's
	// own last failure to reach the apiserver, when later) a pull Remote is
	// marked Offline.
	OfflineGrace time.Duration
	// ContentGrace is how long a CompiledSync no plan names is kept; zero
	// for content.DefaultGrace.
	ContentGrace time.Duration
	// PushTimeout bounds each request to a push Remote's cluster.
	PushTimeout time.Duration
	// PushPoll is how often a push Remote's status is read while it progresses.
	PushPoll time.Duration
	// Kubeconfig says which fields of push Remotes' kubeconfigs, beyond
	// inline credentials, the push and BootstrapModule controllers accept.
	Kubeconfig kubeconfig.Options
	// SourceNetworks is the policy admission judges the hosts of Modules'
	// and BootstrapModules' source URLs by.
	SourceNetworks network.Policy
	// Concurrent is how many objects each controller reconciles at once.
	Concurrent int
	// Management is the API URL and CA bundle agents connect to, written
	// into each RegistrationToken's agent values.
	Management credential.Management
	// AgentChart is the fleet-agent chart released with the manager's, as
	// helm install takes it (reference and --version), written into each
	// RegistrationToken's Secret.
	AgentChart string
	// Namespace is the manager's own namespace, where ConfigMaps labelled
	// fleeet.dev/policy=true hold user policies; empty disables them.
	Namespace string
	// MaxPlanBytes bounds the size of a compiled ProxyAssemblage's spec;
	// zero means DefaultMaxPlanBytes.
	MaxPlanBytes int
	// MaxObjectNodes bounds the JSON nodes an object written to a fleeet
	// kind may hold outside metadata.managedFields, refused by the webhook
	// before it decodes the review; zero means DefaultMaxObjectNodes.
	MaxObjectNodes int
	// MaxMoving caps the Remotes moving at once across every rollout; zero
	// for no cap.
	MaxMoving int
	// PrometheusURL is the Prometheus-compatible server the checks of
	// rollout stages ask; empty for none, which holds every stage with a
	// check.
	PrometheusURL string
	// AdmissionOnly serves the admission webhooks and runs no controller,
	// so fleetctl restore can write a rebuilt management cluster's state
	// before any rollout, compile or registration acts on half of it.
	AdmissionOnly bool
	// InventoryServiceAccountName is the spec.serviceAccountName of Remotes
	// enrolled from an inventory object without the
	// fleeet.dev/service-account-name annotation.
	InventoryServiceAccountName string
	// InventoryAccessProvider names the ClusterProfile access provider the
	// manager reaches profiles' clusters through.
	InventoryAccessProvider string
	// Recovery is the endpoint where clusters whose credential is rejected
	// get a new one; off unless its bind address is set.
	Recovery recovery.Options
	// Shard divides the per-Remote controllers among the replicas, through
	// membership Leases in Namespace; off without a Namespace.
	Shard shard.Options
}

// FlagSourceNetworks is the prefix of the flag listing the networks source
// URLs may not name.
const FlagSourceNetworks = "source-networks"

// DefaultMaxPlanBytes is the plan size limit when Options leaves it zero.
const DefaultMaxPlanBytes = compile.DefaultMaxPlanBytes

// DefaultMaxObjectNodes is the object node limit when Options leaves it
// zero.
const DefaultMaxObjectNodes = webhooks.DefaultMaxObjectNodes

// Admission limits: how long one request may be judged, and how many are
// judged at once.
const (
	admissionTimeout     = 3 * time.Second
	admissionConcurrency = 64
)

// Configure sets what the fleet-manager's controller-runtime manager must be
// built with, for the binary and for tests alike: a cache that holds whole
// only the Secrets the manager writes for itself and those offered for
// delivery, and every other Secret's metadata alone (secrets.NewCache).
// The controllers Setup registers read every other Secret they need from
// the apiserver.
func Configure(o *ctrl.Options) {
	o.NewCache = secrets.NewCache
}

// Setup registers every fleet-manager controller with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	fleetmetrics.RegisterManager(mgr.GetClient())
	own, err := setupAdmission(ctx, mgr, o)
	if err != nil || o.AdmissionOnly {
		return err
	}
	members, err := setupShard(ctx, mgr, o)
	if err != nil {
		return err
	}
	if err := setupModules(ctx, mgr, o, members, own); err != nil {
		return err
	}
	push := &remote.PushReconciler{Shard: members, Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(Name), Timeout: o.PushTimeout, Poll: o.PushPoll, Kubeconfig: o.Kubeconfig, Concurrent: o.Concurrent}
	if err := push.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := (&remote.DeliveryReconciler{Shard: members, Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(Name), Concurrent: o.Concurrent}).SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := (&bootstrap.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(Name), FieldOwner: Name, Kubeconfig: o.Kubeconfig, Concurrent: o.Concurrent}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := recovery.Add(mgr, Name, o.Recovery); err != nil {
		return err
	}
	tokens := &registration.TokenReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(Name), Management: o.Management, AgentChart: o.AgentChart, Concurrent: o.Concurrent}
	if err := tokens.SetupWithManager(mgr); err != nil {
		return err
	}
	remotes := &registration.RemoteReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(Name), Concurrent: o.Concurrent}
	if err := remotes.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	inventories := &inventory.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(Name), Concurrent: o.Concurrent,
		ServiceAccountName: o.InventoryServiceAccountName, AccessProvider: o.InventoryAccessProvider}
	return inventories.SetupWithManager(mgr)
}

// SetupModules registers with mgr the controllers that carry Modules to the
// Remotes they select, as Setup does: the compiler, which writes every
// Remote's plan, the health controller, whose Connected condition tells
// which Remotes are offline, and the Module controller, which rolls each
// Module out across those plans. The Module controller's tests run these
// alone, unsharded, and without admission: the compiler judges no plan
// write in process.
func SetupModules(ctx context.Context, mgr ctrl.Manager, o Options) error {
	return setupModules(ctx, mgr, o, nil, ownWrites{})
}

// setupShard makes this replica a member of the shards when o asks for
// sharding, and returns nil otherwise.
func setupShard(ctx context.Context, mgr ctrl.Manager, o Options) (*shard.Members, error) {
	if o.Namespace == "" {
		return nil, nil
	}
	return shard.New(ctx, mgr, Name, o.Namespace, o.Shard)
}

// setupModules is SetupModules with the per-Remote controllers sharded by
// members (nil for none) and the compiler judging its plan writes as own
// says. The Module controller, which decides which
// Remotes a rollout admits under the fleet-wide budget, stays on the
// leader; the sharded compiler only carries out what Module status says.
func setupModules(ctx context.Context, mgr ctrl.Manager, o Options, members *shard.Members, own ownWrites) error {
	if err := (&compiler.Reconciler{Shard: members, Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(Name), Concurrent: o.Concurrent,
		MaxPlanBytes: cmp.Or(o.MaxPlanBytes, DefaultMaxPlanBytes), Judge: own.judge, User: own.user}).SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := (&content.Collector{Client: mgr.GetClient(), Grace: o.ContentGrace}).SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := (&remote.HealthReconciler{Shard: members, Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(Name), Grace: o.OfflineGrace, Concurrent: o.Concurrent,
		ManagerVersion: version.Version}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&versions.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(Name), Concurrent: o.Concurrent,
		HTTP: sourceClient(o.SourceNetworks)}).SetupWithManager(mgr); err != nil {
		return err
	}
	modules := &module.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(Name), MaxMoving: o.MaxMoving, Concurrent: o.Concurrent}
	if o.PrometheusURL != "" {
		modules.Checks = &promquery.Asker{Client: &promquery.Client{URL: o.PrometheusURL, HTTP: prometheusClient()}, Workers: checkWorkers}
	}
	return modules.SetupWithManager(mgr)
}

// checkWorkers is how many stage checks the manager asks at once: a slow
// server delays answers, never a reconcile.
const checkWorkers = 2

// prometheusClient asks the server the platform team configured, never
// through a proxy from the environment, following no redirect: what a
// stage's check asks goes where --prometheus-url says and nowhere else.
func prometheusClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{TLSHandshakeTimeout: 10 * time.Second, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("the Prometheus-compatible server redirected the query; --prometheus-url must name the server itself")
		},
	}
}

// sourceClient reads the versions sources offer for version policies: never
// through a proxy from the environment, never to an address the source
// network policy refuses (checked on each connection, redirects included),
// at most three redirects.
func sourceClient(p network.Policy) *http.Client {
	return &http.Client{
		Transport: &http.Transport{DialContext: p.Dialer(), TLSHandshakeTimeout: 10 * time.Second,
			ResponseHeaderTimeout: 20 * time.Second, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute},
		CheckRedirect: func(_ *http.Request, via []*http.Request) error {
			if len(via) >= 3 {
				return errors.New("more than three redirects")
			}
			return nil
		},
	}
}

// ownWrites is how the compiler judges the manager's own plan writes in
// process (compiler.Reconciler.Judge): by the policies the webhook serves,
// as the manager's own user. The zero value judges none.
type ownWrites struct {
	judge compiler.Judge
	user  authenticationv1.UserInfo
}

// setupAdmission serves the policy webhook and loads user policies, and
// returns the judge of the manager's own plan writes, by the same policies.
func setupAdmission(ctx context.Context, mgr ctrl.Manager, o Options) (ownWrites, error) {
	engine, err := policy.New(ctx)
	if err != nil {
		return ownWrites{}, err
	}
	self, err := whoAmI(ctx, mgr.GetClient())
	if err != nil {
		return ownWrites{}, err
	}
	judge := &webhooks.Policies{
		Engine:          engine,
		Reader:          mgr.GetClient(),
		LiveReader:      mgr.GetAPIReader(),
		Registrations:   &webhooks.Registrations{Reader: mgr.GetAPIReader()},
		SourceNetworks:  network.Policy{Denied: o.SourceNetworks.Denied, Flag: FlagSourceNetworks},
		ManagerUsername: self.Username,
		MaxPlanBytes:    cmp.Or(o.MaxPlanBytes, DefaultMaxPlanBytes),
		MaxObjectNodes:  cmp.Or(o.MaxObjectNodes, DefaultMaxObjectNodes),
		Timeout:         admissionTimeout,
		Concurrency:     admissionConcurrency,
	}
	var handler admission.Handler = judge
	own := ownWrites{judge: judge, user: authenticationv1.UserInfo{Username: self.Username, UID: self.UID, Groups: self.Groups}}
	if o.Namespace != "" {
		// Every replica loads the user policies, is unready until those
		// present at start are in force, and refuses admission until then
		// rather than judge by the built-in policies alone.
		policies := &policyconfig.Reconciler{Client: mgr.GetClient(), Engine: engine, Namespace: o.Namespace,
			Recorder: mgr.GetEventRecorder(Name)}
		if err := policies.SetupWithManager(mgr); err != nil {
			return ownWrites{}, err
		}
		if err := mgr.AddReadyzCheck("user-policies", policies.Ready); err != nil {
			return ownWrites{}, fmt.Errorf("adding readiness check: %w", err)
		}
		handler = untilLoaded{loaded: policies.Loaded, Handler: handler}
		own.judge = judgeUntilLoaded{loaded: policies.Loaded, Policies: judge}
	}
	mgr.GetWebhookServer().Register(webhooks.Path, judge.Guard(&admission.Webhook{Handler: handler}))
	return own, nil
}

// untilLoaded refuses every admission request until loaded says the user
// policies are in force: a replica that has just started must not let
// through what a user policy denies. The refusal is an error, which the
// webhook's failurePolicy Fail turns into a denial the caller can retry.
type untilLoaded struct {
	loaded func() bool
	admission.Handler
}

// Handle refuses the request while the user policies are not loaded, and
// otherwise passes it on.
func (h untilLoaded) Handle(ctx context.Context, req admission.Request) admission.Response {
	if !h.loaded() {
		return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("%w; this replica of the fleet-manager refuses every request until they are", policyconfig.ErrNotLoaded))
	}
	return h.Handler.Handle(ctx, req)
}

// judgeUntilLoaded judges the manager's own writes as Policies does once
// loaded says the user policies are in force, and fails until then, as
// untilLoaded refuses the webhook's requests: the compiler retries a write
// it could not judge, rather than tell a Module it was refused.
type judgeUntilLoaded struct {
	loaded func() bool
	*webhooks.Policies
}

// Judge fails while the user policies are not loaded, and otherwise judges
// req.
func (j judgeUntilLoaded) Judge(ctx context.Context, req admission.Request) (admission.Response, error) {
	if !j.loaded() {
		return admission.Response{}, policyconfig.ErrNotLoaded
	}
	return j.Policies.Judge(ctx, req)
}

// whoAmI asks the apiserver which user the manager is, so policies can tell
// the manager's own writes apart and the compiler can judge its own writes
// as from that user.
func whoAmI(ctx context.Context, c client.Client) (authenticationv1.UserInfo, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("asking the apiserver who the manager is: %w", err)
	}
	return review.Status.UserInfo, nil
}
