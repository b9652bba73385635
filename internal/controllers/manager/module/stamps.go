package module

import (
	"sync"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// stamps remembers each plan object's compiler stamps, parsed, by its
// resourceVersion (each part of a plan split over several on its own). Every Module reconcile reads the stamps of every plan of
// its namespace; parsing the annotation each time was most of the
// manager's CPU at 1,000 Remotes × 50 Modules. The maps it returns are
// shared: read them only.
type stamps struct {
	mu    sync.Mutex
	plans map[string]map[string]parsedStamps // namespace → plan → stamps
}

type parsedStamps struct {
	resourceVersion string
	stamps          map[string]fleeetv1.Compiled
}

// of returns the plan's stamps, parsing them once per plan version.
func (s *stamps) of(pa *fleeetv1.ProxyAssemblage) map[string]fleeetv1.Compiled {
	s.mu.Lock()
	p, ok := s.plans[pa.Namespace][pa.Name]
	s.mu.Unlock()
	if ok && p.resourceVersion == pa.ResourceVersion {
		return p.stamps
	}
	p = parsedStamps{resourceVersion: pa.ResourceVersion, stamps: pa.CompiledSyncs()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plans == nil {
		s.plans = map[string]map[string]parsedStamps{}
	}
	if s.plans[pa.Namespace] == nil {
		s.plans[pa.Namespace] = map[string]parsedStamps{}
	}
	s.plans[pa.Namespace][pa.Name] = p
	return p.stamps
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
