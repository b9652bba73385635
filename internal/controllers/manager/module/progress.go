package module

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// progressEvery is how often at most a Module's status is written when
// only its progress moved: its counts and the wording of conditions that
// keep their status and reason. While a fleet's plans land (a thousand
// Remotes coming up, a version change reaching them) each Module would
// otherwise be written on nearly every reconcile, about once a second,
// every write carrying the whole Module. A change of anything else (a
// condition's status or reason, the rollout's admissions, its history) is
// written at once, and the counts held back are written once progressEvery
// has passed.
const progressEvery = 2 * time.Second

// progress remembers when each Module's status was last written. It lives
// in memory: a restarted manager writes the first change at once.
type progress struct {
	mu      sync.Mutex
	written map[types.NamespacedName]time.Time
}

// hold returns how long the status after of Module key, generation
// generation, is to wait before it is written, 0 to write it now (which it
// records as written at now): after waits only when it differs from
// before, the status as read, in progress alone.
func (p *progress) hold(key types.NamespacedName, generation int64, before, after *fleeetv1.ModuleStatus, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if equality.Semantic.DeepEqual(before, after) {
		return 0
	}
	if last, ok := p.written[key]; ok && before.ObservedGeneration == generation && progressOnly(before, after) {
		if wait := progressEvery - now.Sub(last); wait > 0 {
			return wait
		}
	}
	if p.written == nil {
		p.written = map[types.NamespacedName]time.Time{}
	}
	p.written[key] = now
	return 0
}

// forget drops what was remembered of a deleted Module.
func (p *progress) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.written, key)
}

// progressOnly reports whether after differs from before in nothing but
// progress: its summary and its conditions' messages.
func progressOnly(before, after *fleeetv1.ModuleStatus) bool {
	a, b := after.DeepCopy(), before.DeepCopy()
	a.Summary, b.Summary = fleeetv1.ModuleSummary{}, fleeetv1.ModuleSummary{}
	a.ObservedGeneration = b.ObservedGeneration
	if len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		a.Conditions[i].Message, b.Conditions[i].Message = "", ""
	}
	return equality.Semantic.DeepEqual(a, b)
}
