package runner

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fleeet-dev/fleeet/internal/ratelimit"
)

// A client past its allowance gets 429 with Retry-After before the
// request reaches the filter that would review its token; another address
// is still served, until every client together has used up theirs.
func TestMetricsRequestsAreBoundedPerClientAndInAll(t *testing.T) {
	g := NewWithT(t)
	reviews := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reviews++ })
	now := time.Now()
	h := limitMetrics(ratelimit.NewShared(metricsPerClient, metricsBurstPerClient, metricsInAll, metricsBurstInAll, maxMetricsClients),
		func() time.Time { return now }, next)
	get := func(addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for range metricsBurstPerClient {
		g.Expect(get("198.51.100.7:4000").Code).To(Equal(http.StatusOK))
	}
	refused := get("198.51.100.7:4001")
	g.Expect(refused.Code).To(Equal(http.StatusTooManyRequests), "another port of the same address is the same client")
	g.Expect(refused.Header().Get("Retry-After")).To(Equal("1"))
	g.Expect(reviews).To(Equal(metricsBurstPerClient), "a refused request reaches no review")

	served := 0
	for i := range 1000 {
		if get(fmt.Sprintf("[2001:db8::%x]:1", i)).Code == http.StatusOK {
			served++
		}
	}
	g.Expect(served).To(BeNumerically("<=", metricsBurstInAll-metricsBurstPerClient), "every client together is bounded")
}
