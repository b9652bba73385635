// Package reach tells from an error whether the manager could not reach its
// own apiserver, as opposed to being refused by it, and remembers when that
// last happened: while the apiserver is away nothing reaches it, agents'
// heartbeats included, so what was not heard of meanwhile says nothing.
package reach

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Unreachable reports whether err says the apiserver could not be reached
// or did not answer in time (a transport error, 503, 504, 429 or a
// timeout), rather than that it refused the request.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var answer apierrors.APIStatus
	if !errors.As(err, &answer) {
		return !errors.Is(err, context.Canceled)
	}
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsTooManyRequests(err)
}

// Outages remembers the last time a request failed Unreachable. The zero
// value is ready; it is safe for concurrent use, and a nil *Outages
// remembers nothing.
type Outages struct {
	at atomic.Int64 // UnixNano; 0 for never
}

// Observe records now when err is Unreachable.
func (o *Outages) Observe(err error, now time.Time) {
	if o == nil || !Unreachable(err) {
		return
	}
	for {
		old := o.at.Load()
		if now.UnixNano() <= old || o.at.CompareAndSwap(old, now.UnixNano()) {
			return
		}
	}
}

// Last is when a request last failed Unreachable; zero for never.
func (o *Outages) Last() time.Time {
	if o == nil {
		return time.Time{}
	}
	if at := o.at.Load(); at != 0 {
		return time.Unix(0, at)
	}
	return time.Time{}
}
