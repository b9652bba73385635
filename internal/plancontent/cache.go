package plancontent

import (
	"context"
	"sync"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Cache keeps the CompiledSyncs and CompiledPlans a reader has read. Both
// never change once written, so one read of a name serves every later plan
// that names it, and a cluster reads each version of each sync once.
type Cache struct {
	// From reads what the cache does not hold.
	From Store

	mu    sync.Mutex
	syncs map[string]*fleeetv1.CompiledSync
	plans map[string]*fleeetv1.CompiledPlan
}

// CompiledSync reads through the cache. What it returns is shared: only
// read it.
func (c *Cache) CompiledSync(ctx context.Context, name string) (*fleeetv1.CompiledSync, error) {
	return cached(ctx, c, &c.syncs, name, c.From.CompiledSync)
}

// CompiledPlan reads through the cache. What it returns is shared: only
// read it.
func (c *Cache) CompiledPlan(ctx context.Context, name string) (*fleeetv1.CompiledPlan, error) {
	return cached(ctx, c, &c.plans, name, c.From.CompiledPlan)
}

func cached[T any](ctx context.Context, c *Cache, byName *map[string]*T, name string, read func(context.Context, string) (*T, error)) (*T, error) {
	c.mu.Lock()
	o, ok := (*byName)[name]
	c.mu.Unlock()
	if ok {
		return o, nil
	}
	o, err := read(ctx, name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if *byName == nil {
		*byName = map[string]*T{}
	}
	(*byName)[name] = o
	return o, nil
}

// Keep forgets every CompiledPlan that no part of plan names and every
// CompiledSync that neither plan nor a CompiledPlan kept names, so the
// cache holds no more than the plan.
func (c *Cache) Keep(plan fleeetv1.ProxyPlan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	named, synced := map[string]bool{}, map[string]bool{}
	for _, pa := range plan {
		if pa == nil {
			continue
		}
		named[pa.Spec.CompiledPlan] = true
		for i := range pa.Spec.Assemblage.Syncs {
			synced[pa.Spec.Assemblage.Syncs[i].Content] = true
		}
	}
	for name, cp := range c.plans {
		if !named[name] {
			delete(c.plans, name)
			continue
		}
		for i := range cp.Spec.Entries {
			synced[cp.Spec.Entries[i].Content] = true
		}
	}
	for name := range c.syncs {
		if !synced[name] {
			delete(c.syncs, name)
		}
	}
}
