package fleetmetrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Agent-side metrics, set by the Assemblage controller.
var (
	syncs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleeet_agent_syncs",
		Help: "The syncs of each Assemblage by state (Ready, Progressing, Blocked, Failed).",
	}, []string{"namespace", "assemblage", "state"})
	ApplyDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fleeet_agent_apply_duration_seconds",
		Help:    "Time to server-side apply one sync's Flux objects.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	registerAgent sync.Once
)

// RegisterAgent registers the agent's metrics.
func RegisterAgent() {
	registerAgent.Do(func() { metrics.Registry.MustRegister(syncs, ApplyDuration) })
}

// SetSyncs records how many of an Assemblage's syncs are in each state;
// nil statuses (the Assemblage is gone) drops its series.
func SetSyncs(namespace, assemblage string, statuses []fleeetv1.SyncStatus) {
	syncs.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "assemblage": assemblage})
	if statuses == nil {
		return
	}
	for _, state := range []fleeetv1.SyncState{fleeetv1.SyncReady, fleeetv1.SyncProgressing, fleeetv1.SyncBlocked, fleeetv1.SyncFailed} {
		n := 0
		for _, s := range statuses {
			if s.State == state {
				n++
			}
		}
		syncs.WithLabelValues(namespace, assemblage, string(state)).Set(float64(n))
	}
}
