package assemblage

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/flux"
)

// driftRecheck is how soon a sync whose drift was detected, and neither
// corrected nor still drifted, is read again: helm-controller records the
// event of its correction after the status change that woke the agent.
const driftRecheck = 5 * time.Second

// driftRecheckFor bounds how long after drift was detected the agent keeps
// waiting for its correction to be reported.
const driftRecheckFor = time.Minute

// correctionPending reports whether drift was detected within
// driftRecheckFor and its correction is not reported yet.
func correctionPending(d *fleeetv1.SyncDrift, now time.Time) bool {
	return d != nil && !d.Drifted && d.Detected > d.Corrected && d.LastDetected != nil && now.Sub(d.LastDetected.Time) < driftRecheckFor
}

// driftReads remembers, per HelmRelease, what the last drift read found
// and at which flux.DriftMark, so a release's events are listed again only
// when helm-controller's Drifted condition moved or a correction is still
// to be reported: an Assemblage reconciles at every status change of any
// of its Flux objects, and few of those are about drift.
type driftReads struct {
	mu   sync.Mutex
	last map[client.ObjectKey]driftRead
}

type driftRead struct {
	mark  string
	drift *fleeetv1.SyncDrift
}

// read returns the drift of a sync's applier, listing its events through
// events only when what was read before may be out of date. A failed list
// reports no drift this time, and is tried again at the next reconcile.
func (d *driftReads) read(ctx context.Context, events client.Reader, applier client.Object, now time.Time) *fleeetv1.SyncDrift {
	key, mark := client.ObjectKeyFromObject(applier), flux.DriftMark(applier)
	if mark == "" {
		d.forget(key)
		return nil
	}
	d.mu.Lock()
	last, ok := d.last[key]
	d.mu.Unlock()
	if ok && last.mark == mark && !correctionPending(last.drift, now) {
		return last.drift.DeepCopy()
	}
	drift, err := flux.ReadDrift(ctx, events, applier)
	if err != nil {
		log.FromContext(ctx).Error(err, "Cannot read drift", "sync", applier.GetLabels()[fleeetv1.SyncLabel])
		return nil
	}
	d.mu.Lock()
	if d.last == nil {
		d.last = map[client.ObjectKey]driftRead{}
	}
	d.last[key] = driftRead{mark: mark, drift: drift}
	d.mu.Unlock()
	return drift.DeepCopy()
}

// forget drops what was read of a HelmRelease that is gone.
func (d *driftReads) forget(key client.ObjectKey) {
	d.mu.Lock()
	delete(d.last, key)
	d.mu.Unlock()
}
