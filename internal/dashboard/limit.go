package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/fleeet-dev/fleeet/internal/ratelimit"
)

// The in-cluster dashboard asks the apiserver for a TokenReview whenever it
// meets a token it has no fresh answer for, so anyone who can reach it
// could make it flood the apiserver with random tokens. These limits bound
// the reviews one client, and every client together, can cause; requests
// answered from the review cache cost nothing.
const (
	// reviewsPerClient and reviewBurstPerClient bound one client's reviews:
	// a browser needs one per token and reviewTTL.
	reviewsPerClient     = rate.Limit(1)
	reviewBurstPerClient = 10
	// reviewsInAll and reviewBurstInAll bound every client's together, so
	// that many addresses (IPv6 hands out plenty) gain an attacker little.
	reviewsInAll     = rate.Limit(20)
	reviewBurstInAll = 50
	// maxTrackedClients bounds the limiters kept; the least recently seen
	// client's is dropped first.
	maxTrackedClients = 10000
)

// rateLimited answers a request that would cost a TokenReview its client
// may not have yet.
type rateLimited struct{ retryAfter time.Duration }

func (r rateLimited) Error() string {
	return fmt.Sprintf("too many tokens to review from this client: retry in %d s", ratelimit.RetrySeconds(r.retryAfter))
}

// newReviewLimits bounds the reviews each client, and every client
// together, can cause.
func newReviewLimits() *ratelimit.Shared {
	return ratelimit.NewShared(reviewsPerClient, reviewBurstPerClient, reviewsInAll, reviewBurstInAll, maxTrackedClients)
}

// clientOf names the client a request comes from: the peer's IP address.
// In a cluster, behind a Service, the peer is the client. Behind a proxy
// the operator trusts (trustForwardedFor), it is the last address of
// X-Forwarded-For, the one that proxy appended; a client can write any
// X-Forwarded-For it likes, so it is never read otherwise.
func clientOf(r *http.Request, trustForwardedFor bool) string {
	if trustForwardedFor {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			hops := strings.Split(xff[len(xff)-1], ",")
			if ip := net.ParseIP(strings.TrimSpace(hops[len(hops)-1])); ip != nil {
				return ip.String()
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
