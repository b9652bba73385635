// Package agent wires the fleet-agent's controllers into a controller-runtime
// manager, for the binary and for tests alike.
package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"

	"github.com/fleeet-dev/fleeet/internal/controllers/agent/assemblage"
	"github.com/fleeet-dev/fleeet/internal/controllers/agent/upstream"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/fleetmetrics"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/served"
	"github.com/fleeet-dev/fleeet/internal/version"
)

// Name is the fleet-agent's name as a field manager, event source and leader
// election identity.
const Name = "fleet-agent"

// fluxPoll is how often an agent started before Flux asks whether Flux's
// kinds are served yet: it does nothing for the fleet until they are.
const fluxPoll = 10 * time.Second

// DefaultHeartbeat is the Lease renewal interval: 1.5 requests a minute,
// each landing within the manager's default 60 s offline grace with 20 s
// to spare, so a renewal that is late by less than that marks no Remote
// Offline.
const DefaultHeartbeat = 40 * time.Second

// Options configure the fleet-agent's controllers.
type Options struct {
	// Concurrent is how many Assemblages and Upstreams reconcile at once.
	Concurrent int
	// Heartbeat is how often the agent renews its Lease in the management
	// cluster; keep it well under the manager's --offline-grace.
	Heartbeat time.Duration
	// AllowUnconfined lets Upstreams and Assemblages without
	// spec.serviceAccountName run, with Flux applying as itself and bindings
	// read as the agent. Off (the default), they are refused: a tenant's
	// syncs and bindings are confined by its ServiceAccount only.
	AllowUnconfined bool
	// FetchJitter delays each new version's apply, and so its fetch, by up
	// to this long, drawn per agent: a fleet's clusters do not all hit the
	// git or chart server in the same second.
	FetchJitter time.Duration
	// CredentialLifetime is how long each token the agent mints for its
	// cluster's identity lives (credential.CheckLifetime); 0 is
	// credential.Lifetime.
	CredentialLifetime time.Duration
	// PushOnly leaves the Upstream controller out: the cluster registers
	// with no management cluster and mirrors no plan, because the manager
	// writes its Assemblages itself through a kubeconfig (push mode). The
	// agent then reads no Upstream, and of Secrets only those delivered.
	PushOnly bool
}

// Confine confines what the agent reads to its own namespace, for
// Upstreams, and to the tenants' namespaces, for everything else, so that
// the chart can grant namespaced Roles only. An empty own or tenants leaves
// that part cluster-wide. Secrets are never cached: those of its own
// namespace (each Upstream's credential and registration token) it reads
// by name, so the chart grants it those names alone there, and in the
// tenants' namespaces it reads none at all, delivering blind
// (delivery.Writer), so the chart grants it no read there. The workloads
// the agent reads for their health are cached without their pod
// templates: it needs only their pod counts and selectors, and keeps
// neither the memory nor whatever a template's environment holds.
func Confine(o *ctrl.Options, own string, tenants []string) {
	o.Cache = cacheOptions(own, tenants)
	o.Client.Cache = &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}
}

func cacheOptions(own string, tenants []string) cache.Options {
	var o cache.Options
	if len(tenants) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range tenants {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	o.ByObject = map[client.Object]cache.ByObject{
		&appsv1.Deployment{}:  {Transform: stripPodTemplate},
		&appsv1.StatefulSet{}: {Transform: stripPodTemplate},
		&appsv1.DaemonSet{}:   {Transform: stripPodTemplate},
	}
	if own != "" {
		o.ByObject[&fleeetv1.Upstream{}] = cache.ByObject{Namespaces: map[string]cache.Config{own: {}}}
	}
	return o
}

// stripPodTemplate drops a cached workload's pod template and managed fields.
func stripPodTemplate(obj any) (any, error) {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		w.Spec.Template, w.ManagedFields = corev1.PodTemplateSpec{}, nil
	case *appsv1.StatefulSet:
		w.Spec.Template, w.ManagedFields = corev1.PodTemplateSpec{}, nil
		w.Spec.VolumeClaimTemplates = nil
	case *appsv1.DaemonSet:
		w.Spec.Template, w.ManagedFields = corev1.PodTemplateSpec{}, nil
	}
	return obj, nil
}

// Setup upgrades the agent's own CRDs and registers every fleet-agent
// controller with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.CredentialLifetime != 0 {
		if err := credential.CheckLifetime(o.CredentialLifetime); err != nil {
			return fmt.Errorf("--credential-lifetime: %w", err)
		}
	}
	fleetmetrics.RegisterAgent()
	// Before any informer starts, so the controllers watch the new schema.
	// The cache does not serve reads yet: read and write directly.
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return err
	}
	log := mgr.GetLogger().WithName("crds")
	if err := UpgradeCRDs(logr.NewContext(ctx, log), direct, Name, version.Version); err != nil {
		// The CRDs present still serve this agent's kinds, if not its newest
		// fields: keep running rather than stop the cluster's deliveries.
		log.Error(err, "Running with the CustomResourceDefinitions installed; the agent chart's ClusterRole <release>-crds "+
			"grants what upgrading them needs, or apply charts/fleet-agent/crds by hand")
	}
	readers := assemblage.NewServiceAccountReaders(mgr.GetConfig(), mgr.GetScheme(), mgr.GetRESTMapper())
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	// Watching Flux's kinds before they are served would stop the agent
	// (package served): until then the Upstream reports FluxMissing
	// upstream (the push controller does, for a pushed cluster), the
	// heartbeat goes on and no Assemblage is applied, so nothing running
	// is touched.
	asm := &assemblage.Reconciler{
		Client:          mgr.GetClient(),
		ReadAs:          readers.For,
		APIReader:       mgr.GetAPIReader(),
		AllowUnconfined: o.AllowUnconfined,
		Recorder:        mgr.GetEventRecorder(Name),
		FieldOwner:      Name,
		Concurrent:      o.Concurrent,
		FetchJitter:     o.FetchJitter,
	}
	if err := served.When(mgr, "Flux's", fluxPoll, func() ([]string, error) { return flux.Unserved(dc, mgr.GetScheme()) },
		func() error { return asm.SetupWithManager(mgr) }); err != nil {
		return err
	}
	if o.PushOnly {
		return nil
	}
	kube, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the cluster's Kubernetes version: %w", err)
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	return (&upstream.Reconciler{
		Client:             mgr.GetClient(),
		Recorder:           mgr.GetEventRecorder(Name),
		Heartbeat:          o.Heartbeat,
		CredentialLifetime: o.CredentialLifetime,
		Versions:           upstream.Versions{Agent: version.Version, Kubernetes: kube.GitVersion},
		InspectFlux:        (&flux.Inspector{Reader: mgr.GetAPIReader()}).Inspect,
		Concurrent:         o.Concurrent,
		AllowUnconfined:    o.AllowUnconfined,
		APIReader:          mgr.GetAPIReader(),
	}).SetupWithManager(ctx, mgr)
}
