package fleettest

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// Contents reads the CompiledSyncs and CompiledPlans plans name, each once,
// so that a test can see what a plan holds whole, whichever form its agent
// reads.
type Contents struct {
	Reader client.Reader

	mu     sync.Mutex
	caches map[string]*plancontent.Cache
}

// Syncs returns pa's syncs, each whole; when a CompiledSync or CompiledPlan
// cannot be read, the part's own entries as they are, which name no version.
func (c *Contents) Syncs(pa *fleeetv1.ProxyAssemblage) []fleeetv1.NamedSync {
	c.mu.Lock()
	if c.caches == nil {
		c.caches = map[string]*plancontent.Cache{}
	}
	cache := c.caches[pa.Namespace]
	if cache == nil {
		cache = &plancontent.Cache{From: plancontent.From(c.Reader, pa.Namespace)}
		c.caches[pa.Namespace] = cache
	}
	c.mu.Unlock()
	resolved, err := plancontent.ResolvePlan(context.Background(), fleeetv1.ProxyPlan{pa}, cache)
	if err != nil {
		return pa.Spec.Assemblage.Syncs
	}
	return resolved[0].Spec.Assemblage.Syncs
}

// HeldTag is HeldTag of pa read as its cluster reads it: its syncs
// resolved (Syncs).
func (c *Contents) HeldTag(pa *fleeetv1.ProxyAssemblage) string {
	return appTag(c.Syncs(pa))
}
