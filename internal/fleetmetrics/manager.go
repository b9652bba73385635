// Package fleetmetrics holds fleeet's Prometheus metrics: the fleet as the
// manager sees it (Remotes, Modules and their rollouts, read from the
// manager's cache at each scrape), how long compiling and writing plans
// take, and, on the agent, each sync's state and how long applying takes.
// Every metric is registered with controller-runtime's registry and served
// on the components' metrics endpoint.
package fleetmetrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/status"
)

// Manager-side histograms, observed by the compiler and the Module
// controller.
var (
	CompileDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fleeet_compile_duration_seconds",
		Help:    "Time to compile one Remote's plan from every Module of its namespace.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	PlanWriteDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fleeet_plan_write_duration_seconds",
		Help:    "Time to write one changed ProxyAssemblage, admission included.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	PlanBytes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fleeet_plan_bytes",
		Help:    "Size of each ProxyAssemblage spec written, in bytes of JSON.",
		Buckets: prometheus.ExponentialBuckets(256, 2, 12),
	})
	RolloutDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fleeet_rollout_duration_seconds",
		Help:    "Time from the manager's first step of a Module's revision to that revision Ready across the fleet.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16),
	})
)

// Rollout states of fleeet_module_rollout_state.
const (
	StateReady       = "ready"
	StateProgressing = "progressing"
	StatePaused      = "paused"
	StateRolledBack  = "rolled_back"
	StateFailed      = "failed"
	StateStalled     = "stalled"
)

var (
	remoteConnected = prometheus.NewDesc("fleeet_remote_connected",
		"1 while the Remote's cluster is Connected, 0 when it is not.", []string{"namespace", "remote"}, nil)
	remoteSuspended = prometheus.NewDesc("fleeet_remote_suspended",
		"1 while the Remote's spec.suspend holds its plan.", []string{"namespace", "remote"}, nil)
	remoteAgentSkew = prometheus.NewDesc("fleeet_remote_agent_skew",
		"1 while the Remote's agent version is outside the skew window of the manager's (AgentCompatible=False), 0 otherwise.",
		[]string{"namespace", "remote"}, nil)
	moduleRemotes = prometheus.NewDesc("fleeet_module_remotes",
		"The Module's selected Remotes by the state of its sync there (total, updated, ready, failed, blocked, offline, suspended, pods_not_ready, drifted).",
		[]string{"namespace", "module", "state"}, nil)
	moduleRollout = prometheus.NewDesc("fleeet_module_rollout_state",
		"1 for the state the Module's rollout is in (ready, progressing, paused, rolled_back, failed, stalled).",
		[]string{"namespace", "module", "state"}, nil)
)

// fleetCollector reports, at each scrape, every Remote and Module its
// reader (the manager's cache) holds.
type fleetCollector struct {
	mu     sync.Mutex
	reader client.Reader
}

// Describe implements prometheus.Collector.
func (f *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{remoteConnected, remoteSuspended, remoteAgentSkew, moduleRemotes, moduleRollout} {
		ch <- d
	}
}

// Collect implements prometheus.Collector; a failed read reports nothing
// rather than zeros.
func (f *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	reader := f.reader
	f.mu.Unlock()
	if reader == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	remotes := &fleeetv1.RemoteList{}
	if err := reader.List(ctx, remotes, client.UnsafeDisableDeepCopy); err == nil {
		for i := range remotes.Items {
			r := &remotes.Items[i]
			ch <- prometheus.MustNewConstMetric(remoteConnected, prometheus.GaugeValue, one(!r.Offline()), r.Namespace, r.Name)
			ch <- prometheus.MustNewConstMetric(remoteSuspended, prometheus.GaugeValue, one(r.Spec.Suspend), r.Namespace, r.Name)
			skew := apimeta.IsStatusConditionFalse(r.Status.Conditions, fleeetv1.AgentCompatibleCondition)
			ch <- prometheus.MustNewConstMetric(remoteAgentSkew, prometheus.GaugeValue, one(skew), r.Namespace, r.Name)
		}
	}
	modules := &fleeetv1.ModuleList{}
	if err := reader.List(ctx, modules, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	for i := range modules.Items {
		m := &modules.Items[i]
		s := m.Status.Summary
		for state, n := range map[string]int32{"total": s.Total, "updated": s.Updated, "ready": s.Ready, "failed": s.Failed,
			"blocked": s.Blocked, "offline": s.Offline, "suspended": s.Suspended, "pods_not_ready": s.PodsNotReady,
			"drifted": s.Drifted} {
			ch <- prometheus.MustNewConstMetric(moduleRemotes, prometheus.GaugeValue, float64(n), m.Namespace, m.Name, state)
		}
		ch <- prometheus.MustNewConstMetric(moduleRollout, prometheus.GaugeValue, 1, m.Namespace, m.Name, rolloutState(m))
	}
}

// rolloutState names the state a Module's rollout is in, from its
// conditions.
func rolloutState(m *fleeetv1.Module) string {
	conds := m.Status.Conditions
	_, byHand := status.PausedByHand(conds) // no failure: the state it would be in otherwise
	switch {
	case apimeta.IsStatusConditionTrue(conds, fleeetv1.RolledBackCondition):
		return StateRolledBack
	case apimeta.IsStatusConditionTrue(conds, fleeetv1.RolloutPausedCondition) && !byHand:
		return StatePaused
	case apimeta.IsStatusConditionTrue(conds, fleeetv1.StalledCondition):
		return StateStalled
	case apimeta.IsStatusConditionTrue(conds, fleeetv1.ReadyCondition):
		return StateReady
	case apimeta.IsStatusConditionTrue(conds, fleeetv1.ReconcilingCondition):
		return StateProgressing
	}
	if c := apimeta.FindStatusCondition(conds, fleeetv1.ReadyCondition); c != nil && c.Status == metav1.ConditionFalse {
		return StateFailed
	}
	return StateProgressing
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// fleet is the process's one fleetCollector.
var (
	fleet           = &fleetCollector{}
	registerManager sync.Once
)

// RegisterManager registers the manager's metrics, the fleet read through
// reader; a later call (a test starting another manager in the process)
// points the fleet at the new reader.
func RegisterManager(reader client.Reader) {
	fleet.mu.Lock()
	fleet.reader = reader
	fleet.mu.Unlock()
	registerManager.Do(func() {
		metrics.Registry.MustRegister(CompileDuration, PlanWriteDuration, PlanBytes, RolloutDuration, fleet)
	})
}
