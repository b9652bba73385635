package assemblage

import (
	"encoding/binary"
	"hash/fnv"
	gosync "sync"

	"time"
)

// jitter spreads the fetches a new version causes: a sync that is not at
// its desired spec is applied only once a delay, in [0, max), has passed
// since the agent first saw that spec. The delay depends on the spec and a
// seed each agent draws when it starts, so a fleet's clusters fetch a new
// version at spread-out times, and one cluster always waits the same for
// the same spec.
type jitter struct {
	max  time.Duration
	seed uint64

	mu    gosync.Mutex
	first map[string]time.Time // sync key and spec hash → first seen
}

func newJitter(max time.Duration, seed uint64) *jitter {
	return &jitter{max: max, seed: seed, first: map[string]time.Time{}}
}

// wait returns how much longer the sync (key) must wait before its spec
// (hash) is applied; 0 means now.
func (j *jitter) wait(key, hash string, now time.Time) time.Duration {
	if j == nil || j.max <= 0 {
		return 0
	}
	id := key + "\x00" + hash
	j.mu.Lock()
	defer j.mu.Unlock()
	first, ok := j.first[id]
	if !ok {
		first = now
		j.first[id] = now
	}
	return max(0, first.Add(j.delay(id)).Sub(now))
}

// done forgets a sync's waits once it is applied.
func (j *jitter) done(key string) {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for id := range j.first {
		if len(id) > len(key) && id[:len(key)+1] == key+"\x00" {
			delete(j.first, id)
		}
	}
}

// delay is the spec's delay for this agent.
func (j *jitter) delay(id string) time.Duration {
	h := fnv.New64a()
	var seed [8]byte
	binary.LittleEndian.PutUint64(seed[:], j.seed)
	h.Write(seed[:])
	h.Write([]byte(id))
	return time.Duration(h.Sum64() % uint64(j.max))
}
