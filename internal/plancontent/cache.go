package plancontent

import (
	"context"
	"sync"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Cache keeps the CompiledSyncs a reader has read. A CompiledSync never
// changes once written, so one read of a name serves every later plan that
// names it, and a cluster reads each version of each sync once.
type Cache struct {
	// Get reads a CompiledSync the cache does not hold.
	Get Getter

	mu     sync.Mutex
	byName map[string]*fleeetv1.CompiledSync
}

// Getter reads through the cache. What it returns is shared: only read it.
func (c *Cache) Getter() Getter {
	return func(ctx context.Context, name string) (*fleeetv1.CompiledSync, error) {
		c.mu.Lock()
		cs, ok := c.byName[name]
		c.mu.Unlock()
		if ok {
			return cs, nil
		}
		cs, err := c.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.byName == nil {
			c.byName = map[string]*fleeetv1.CompiledSync{}
		}
		c.byName[name] = cs
		return cs, nil
	}
}

// Keep forgets every CompiledSync that none of syncs names, so the cache
// holds no more than the plan.
func (c *Cache) Keep(syncs []fleeetv1.NamedSync) {
	named := map[string]bool{}
	for i := range syncs {
		named[syncs[i].Content] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.byName {
		if !named[name] {
			delete(c.byName, name)
		}
	}
}
