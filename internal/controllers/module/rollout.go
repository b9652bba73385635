package module

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// target is one selected Remote as the rollout sees it.
type target struct {
	name string
	// offline: the Remote's Connected condition is False.
	offline bool
	// suspended: the Remote's spec.suspend holds its plan as it is.
	suspended bool
	// holds: the Remote's ProxyAssemblage holds some version of the sync.
	holds bool
	// updated: it holds the Module's current version.
	updated bool
	// state of the sync the cluster reports for the ProxyAssemblage's
	// current generation; empty when not reported yet.
	state fleeetv1.SyncState
	// readySince is when the sync last became Ready.
	readySince time.Time
	// message is the cluster's message for the sync.
	message string
	// health is how the sync's workloads are doing, as the cluster reports.
	health *fleeetv1.WorkloadHealth
}

// podsNotReady reports whether the cluster says the sync's workloads have
// fewer pods ready than they want.
func (t *target) podsNotReady() bool {
	return t.health != nil && t.health.ReadyPods < t.health.DesiredPods
}

// plan is the outcome of one rollout step.
type plan struct {
	admitted []string
	// pausedBy is the updated Remote whose failure pauses the rollout.
	pausedBy *target
	// podsNotReady is the first updated Remote whose workloads have fewer
	// pods ready than they want.
	podsNotReady *target
	// requeueAfter is when a Remote's minReadySeconds ends.
	requeueAfter time.Duration
	// waiting counts the online Remotes not yet running the current version
	// Ready for minReadySeconds.
	waiting int
	summary fleeetv1.ModuleSummary
}

// away reports whether the Remote cannot take a new version now: it is
// offline, or suspended. Such Remotes move last and never hold a rollout up.
func (t *target) away() bool { return t.offline || t.suspended }

// available reports whether a Remote runs the sync Ready for minReady; a
// Remote that holds nothing yet has nothing to lose and is available.
func (t *target) available(now time.Time, minReady time.Duration) bool {
	if !t.holds {
		return true
	}
	return t.state == fleeetv1.SyncReady && now.Sub(t.readySince) >= minReady
}

// step decides which Remotes may move to the Module's current generation:
// at most maxUnavailable online Remotes unavailable at once, counting those
// already moving; Remotes already unavailable on an older version move at
// once; offline and suspended Remotes last, never counted; nothing while an
// updated Remote has failed. previous is the admitted list of the same generation from the
// last step.
func step(m *fleeetv1.Module, targets []target, previous []string, now time.Time) plan {
	ro := m.Spec.Rollout
	minReady := time.Duration(ro.MinReadySeconds) * time.Second
	p := plan{summary: fleeetv1.ModuleSummary{Total: int32(len(targets))}}

	unavailable := 0
	var candidates, away []string
	for i := range targets {
		t := &targets[i]
		if t.offline {
			p.summary.Offline++
		}
		if t.suspended {
			p.summary.Suspended++
		}
		if t.updated {
			p.summary.Updated++
			if t.podsNotReady() {
				p.summary.PodsNotReady++
				if p.podsNotReady == nil {
					p.podsNotReady = t
				}
			}
			switch t.state {
			case fleeetv1.SyncReady:
				p.summary.Ready++
			case fleeetv1.SyncFailed:
				p.summary.Failed++
				if !t.away() && p.pausedBy == nil {
					p.pausedBy = t
				}
			case fleeetv1.SyncBlocked:
				p.summary.Blocked++
			}
		}
		if t.updated && t.state == fleeetv1.SyncReady && now.Sub(t.readySince) < minReady {
			wait := minReady - now.Sub(t.readySince)
			if p.requeueAfter == 0 || wait < p.requeueAfter {
				p.requeueAfter = wait
			}
		}
		if !t.away() && !(t.updated && t.available(now, minReady)) {
			p.waiting++
		}
		switch {
		case t.away():
			if !t.updated {
				away = append(away, t.name)
			}
		case t.updated:
			if !t.available(now, minReady) {
				unavailable++
			}
		case slices.Contains(previous, t.name) || !t.available(now, minReady):
			// Admitted earlier and still moving, or already unavailable on an
			// older version (failing, or superseded mid-rollout): moving it
			// costs no availability.
			unavailable++
			p.admitted = append(p.admitted, t.name)
		default:
			candidates = append(candidates, t.name)
		}
	}
	if p.pausedBy != nil {
		p.admitted = nil
		return p
	}
	budget := maxUnavailable(ro.MaxUnavailable, len(targets)) - unavailable
	for _, name := range candidates {
		if budget <= 0 {
			break
		}
		p.admitted = append(p.admitted, name)
		budget--
	}
	// Offline and suspended Remotes move once every other one has; they apply
	// the new version whenever they come back, and never hold the rollout up.
	if len(candidates) == 0 && unavailable == 0 {
		p.admitted = append(p.admitted, away...)
	}
	slices.Sort(p.admitted)
	return p
}

// maxUnavailable scales the Module's maxUnavailable to the number of
// selected Remotes, rounding down but never below one.
func maxUnavailable(v *intstr.IntOrString, total int) int {
	if v == nil {
		return 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, false)
	if err != nil || n < 1 {
		return 1
	}
	return n
}
