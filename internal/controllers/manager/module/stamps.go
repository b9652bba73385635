package module

import (
	"context"
	"maps"
	"slices"
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
	// shared are the names of the syncs each CompiledPlan holds, by
	// namespace and name: one set for every plan naming it.
	shared map[string]map[string]map[string]bool
}

type parsedStamps struct {
	resourceVersion string
	stamps          map[string]fleeetv1.Compiled
	// own are the part's own entries, shared the syncs of the CompiledPlan
	// it names, sharedName (nil and "" for none).
	own        []fleeetv1.NamedSync
	shared     map[string]bool
	sharedName string
}

// holds reports whether the part holds the named sync.
func (p parsedStamps) holds(name string) bool {
	return p.shared[name] || slices.ContainsFunc(p.own, func(s fleeetv1.NamedSync) bool { return s.Name == name })
}

// names lists the syncs the part holds.
func (p parsedStamps) names() []string {
	names := slices.Collect(maps.Keys(p.shared))
	for i := range p.own {
		names = append(names, p.own[i].Name)
	}
	return names
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
	p = parsedStamps{resourceVersion: pa.ResourceVersion, stamps: stamped, own: pa.Spec.Assemblage.Syncs}
	if name := pa.Spec.CompiledPlan; name != "" {
		p.sharedName = name
		if p.shared = s.sharedOf(pa.Namespace, name); p.shared == nil {
			cp, err := store.CompiledPlan(ctx, name)
			if err != nil {
				return parsedStamps{}
			}
			p.shared = make(map[string]bool, len(cp.Spec.Entries))
			for i := range cp.Spec.Entries {
				p.shared[cp.Spec.Entries[i].Name] = true
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plans == nil {
		s.plans, s.shared = map[string]map[string]parsedStamps{}, map[string]map[string]map[string]bool{}
	}
	if s.plans[pa.Namespace] == nil {
		s.plans[pa.Namespace], s.shared[pa.Namespace] = map[string]parsedStamps{}, map[string]map[string]bool{}
	}
	s.plans[pa.Namespace][pa.Name] = p
	if p.shared != nil {
		s.shared[pa.Namespace][p.sharedName] = p.shared
	}
	return p
}

// sharedOf returns the names of the syncs the CompiledPlan holds, when
// they were read already.
func (s *stamps) sharedOf(namespace, name string) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shared[namespace][name]
}

// holding returns the part of plan holding the named sync, nil when none
// does.
func (s *stamps) holding(ctx context.Context, plan fleeetv1.ProxyPlan, sync string) *fleeetv1.ProxyAssemblage {
	for _, pa := range plan {
		if pa != nil && s.of(ctx, pa).holds(sync) {
			return pa
		}
	}
	return nil
}

// keep forgets the plan objects (each part of a plan split over several) of
// namespace that are not live any more, and the CompiledPlans none of the
// rest names.
func (s *stamps) keep(namespace string, live func(name string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	named := map[string]bool{}
	for name, p := range s.plans[namespace] {
		if !live(name) {
			delete(s.plans[namespace], name)
		} else {
			named[p.sharedName] = true
		}
	}
	for name := range s.shared[namespace] {
		if !named[name] {
			delete(s.shared[namespace], name)
		}
	}
}
