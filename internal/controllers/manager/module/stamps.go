package module

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// stamps remembers, by resourceVersion, what each plan object (each part of
// a plan split over several on its own) says of the Modules compiled into
// it: the compiler's stamps and the names of the syncs it holds, its own
// and those of the CompiledPlan it names. Every Module reconcile reads them
// for every plan of its namespace; parsing the annotation each time was
// most of the manager's CPU at 1,000 Remotes × 50 Modules, and a
// CompiledPlan is shared by many plans and never changes. The maps it
// returns are shared: read them only.
type stamps struct {
	// reader reads CompiledPlans: the cache, and the apiserver for one the
	// cache has not seen yet.
	reader client.Reader

	mu    sync.Mutex
	plans map[string]map[string]parsedStamps // namespace → plan → stamps
}

type parsedStamps struct {
	resourceVersion string
	stamps          map[string]fleeetv1.Compiled
	holds           map[string]bool
}

// of returns what the plan part says, read once per version of it. A
// CompiledPlan that cannot be read leaves the part saying nothing, and is
// read again next time.
func (s *stamps) of(ctx context.Context, pa *fleeetv1.ProxyAssemblage) parsedStamps {
	s.mu.Lock()
	p, ok := s.plans[pa.Namespace][pa.Name]
	s.mu.Unlock()
	if ok && p.resourceVersion == pa.ResourceVersion {
		return p
	}
	store := plancontent.From(s.reader, pa.Namespace)
	stamped, err := plancontent.Stamps(ctx, pa, store)
	if err != nil {
		return parsedStamps{}
	}
	entries, err := plancontent.Entries(ctx, pa, store)
	if err != nil {
		return parsedStamps{}
	}
	p = parsedStamps{resourceVersion: pa.ResourceVersion, stamps: stamped, holds: make(map[string]bool, len(entries))}
	for i := range entries {
		p.holds[entries[i].Name] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plans == nil {
		s.plans = map[string]map[string]parsedStamps{}
	}
	if s.plans[pa.Namespace] == nil {
		s.plans[pa.Namespace] = map[string]parsedStamps{}
	}
	s.plans[pa.Namespace][pa.Name] = p
	return p
}

// holding returns the part of plan holding the named sync, nil when none
// does.
func (s *stamps) holding(ctx context.Context, plan fleeetv1.ProxyPlan, sync string) *fleeetv1.ProxyAssemblage {
	for _, pa := range plan {
		if pa != nil && s.of(ctx, pa).holds[sync] {
			return pa
		}
	}
	return nil
}

// keep forgets the plan objects (each part of a plan split over several) of
// namespace that are not live any more.
func (s *stamps) keep(namespace string, live func(name string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.plans[namespace] {
		if !live(name) {
			delete(s.plans[namespace], name)
		}
	}
}
