package webhooks

import (
	"context"
	"sync"
	"time"
)

// turns hands out turns to be judged, at most n at once per namespace.
// Reviews waiting for a turn of one namespace get it in the order they
// came. A namespace has an entry only while one of its reviews holds or
// waits for a turn, so the namespaces forged reviews name do not pile up.
type turns struct {
	n      int
	mu     sync.Mutex
	queues map[string]*queue
}

// queue is one namespace's turns: a slot for each review being judged, and
// how many reviews hold or wait for one.
type queue struct {
	slots chan struct{}
	users int
}

// take waits up to wait, or until ctx ends, for a turn of namespace ns,
// and returns the function that gives it back, or false when it got none.
func (t *turns) take(ctx context.Context, ns string, wait time.Duration) (release func(), ok bool) {
	t.mu.Lock()
	q := t.queues[ns]
	if q == nil {
		q = &queue{slots: make(chan struct{}, t.n)}
		t.queues[ns] = q
	}
	q.users++
	t.mu.Unlock()
	leave := func() {
		t.mu.Lock()
		if q.users--; q.users == 0 {
			delete(t.queues, ns)
		}
		t.mu.Unlock()
	}
	release = func() {
		<-q.slots
		leave()
	}
	select {
	case q.slots <- struct{}{}:
		return release, true
	default:
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case q.slots <- struct{}{}:
		return release, true
	case <-timer.C:
	case <-ctx.Done():
	}
	leave()
	return nil, false
}
