package module

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetmetrics"
)

// durations measures each Module's rollout, from the first step of a
// revision this process took to that revision entering status.history as
// Succeeded, into fleeet_rollout_duration_seconds. A revision the process
// did not see start (it restarted meanwhile) is not measured.
type durations struct {
	mu     sync.Mutex
	starts map[types.NamespacedName]rolloutStart
}

type rolloutStart struct {
	revision string
	at       time.Time
	done     bool
}

// observe notes a step of the Module's revision, and measures the rollout
// once its history says it succeeded.
func (d *durations) observe(key types.NamespacedName, revision string, history []fleeetv1.RolloutRecord, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.starts == nil {
		d.starts = map[types.NamespacedName]rolloutStart{}
	}
	st, ok := d.starts[key]
	if !ok || st.revision != revision {
		d.starts[key] = rolloutStart{revision: revision, at: now}
		return
	}
	if !st.done && len(history) > 0 && history[0].Revision == revision && history[0].Outcome == fleeetv1.RolloutSucceeded {
		fleetmetrics.RolloutDuration.Observe(now.Sub(st.at).Seconds())
		st.done = true
		d.starts[key] = st
	}
}

// forget drops a deleted Module.
func (d *durations) forget(key types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.starts, key)
}
