// Package ratelimit keeps a token bucket per key (a client address, a
// Remote) for servers anyone can reach, bounded in how many keys it holds:
// beyond that the least recently seen key's bucket is forgotten, so a flood
// of new keys gains fresh allowances but never takes anyone else's.
package ratelimit

import (
	"container/list"
	"sync"

	"golang.org/x/time/rate"
)

// PerKey holds a token bucket of the same rate and burst for each key, at
// most max of them.
type PerKey struct {
	every rate.Limit
	burst int
	max   int

	mu    sync.Mutex
	byKey map[string]*list.Element
	// seen orders the keys from the most to the least recently seen.
	seen *list.List
}

type entry struct {
	key     string
	limiter *rate.Limiter
}

// NewPerKey keeps buckets of every and burst for at most max keys.
func NewPerKey(every rate.Limit, burst, max int) *PerKey {
	return &PerKey{every: every, burst: burst, max: max, byKey: map[string]*list.Element{}, seen: list.New()}
}

// For returns key's bucket, made full if key has none, and marks key seen.
func (p *PerKey) For(key string) *rate.Limiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.byKey[key]; ok {
		p.seen.MoveToFront(e)
		return e.Value.(*entry).limiter
	}
	for p.seen.Len() >= p.max {
		oldest := p.seen.Back()
		delete(p.byKey, oldest.Value.(*entry).key)
		p.seen.Remove(oldest)
	}
	l := rate.NewLimiter(p.every, p.burst)
	p.byKey[key] = p.seen.PushFront(&entry{key: key, limiter: l})
	return l
}

// Len is the number of keys whose buckets are kept.
func (p *PerKey) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byKey)
}

// Holds reports whether key's bucket is kept.
func (p *PerKey) Holds(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.byKey[key]
	return ok
}
