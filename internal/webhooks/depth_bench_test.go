package webhooks

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// deepReview is an AdmissionReview creating a Module whose spec nests n
// levels deep, as a hostile client or tenant would send it.
func deepReview(n int) []byte {
	object := `{"apiVersion":"fleeet.dev/v1alpha1","kind":"Module","metadata":{"name":"deep","namespace":"team-a"},"spec":` +
		strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n) + `}`
	return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",` +
		`"kind":{"group":"fleeet.dev","version":"v1alpha1","kind":"Module"},` +
		`"resource":{"group":"fleeet.dev","version":"v1alpha1","resource":"modules"},` +
		`"namespace":"team-a","name":"deep","operation":"CREATE","userInfo":{"username":"alice"},"object":` + object + `}}`)
}

// BenchmarkDeepReview measures what one deeply nested review costs the
// webhook, from the raw body to the answer:
//
//	go test ./internal/webhooks/ -run '^$' -bench DeepReview -benchmem
func BenchmarkDeepReview(b *testing.B) {
	p := &Policies{Reader: fake.NewClientBuilder().Build(), LiveReader: fake.NewClientBuilder().Build(), Timeout: time.Second, Concurrency: 1}
	for _, depth := range []int{64, 1000, 9000} {
		body := deepReview(depth)
		for _, h := range []struct {
			name    string
			handler http.Handler
		}{
			{"webhook", &admission.Webhook{Handler: p}},
			{"guarded", p.Guard(&admission.Webhook{Handler: p})},
		} {
			b.Run(h.name+"/depth="+itoa(depth), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					rec := httptest.NewRecorder()
					req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					h.handler.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte("nests deeper than")) {
						b.Fatalf("HTTP %d: %s", rec.Code, rec.Body.String())
					}
				}
			})
		}
	}
}
