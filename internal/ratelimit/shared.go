package ratelimit

import (
	"math"
	"time"

	"golang.org/x/time/rate"
)

// Shared bounds each key's calls and every key's together, so that a
// flood from many keys (IPv6 hands out plenty of addresses) gains little.
type Shared struct {
	// All is every key's allowance together.
	All *rate.Limiter
	// Keys holds each key's allowance.
	Keys *PerKey
}

// NewShared allows each key perKey calls a second (burst perKeyBurst),
// every key together all (burst allBurst), and keeps at most maxKeys keys.
func NewShared(perKey rate.Limit, perKeyBurst int, all rate.Limit, allBurst, maxKeys int) *Shared {
	return &Shared{All: rate.NewLimiter(all, allBurst), Keys: NewPerKey(perKey, perKeyBurst, maxKeys)}
}

// Allow takes one call from key's allowance and everyone's and returns 0,
// or takes nothing and returns how long until it could.
func (s *Shared) Allow(key string, now time.Time) time.Duration {
	own := s.Keys.For(key).ReserveN(now, 1)
	if wait := own.DelayFrom(now); wait > 0 {
		own.CancelAt(now)
		return wait
	}
	all := s.All.ReserveN(now, 1)
	if wait := all.DelayFrom(now); wait > 0 {
		all.CancelAt(now)
		own.CancelAt(now)
		return wait
	}
	return 0
}

// RetrySeconds is d rounded up to whole seconds, at least one: a
// Retry-After header's value for a wait Allow returned.
func RetrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
