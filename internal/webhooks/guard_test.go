package webhooks

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
)

// A review whose object nests too deeply is answered by the guard, naming
// the path, and never reaches the handler that would decode it.
func TestGuardDeniesADeepReviewBeforeDecodingIt(t *testing.T) {
	g := NewWithT(t)
	reached := 0
	h := Guard(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(deepReview(9000))))
	g.Expect(reached).To(BeZero(), "the deep review reached the decoding handler")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	out := &admissionv1.AdmissionReview{}
	g.Expect(json.Unmarshal(rec.Body.Bytes(), out)).To(Succeed())
	g.Expect(out.Response.UID).To(BeEquivalentTo("1"))
	g.Expect(out.Response.Allowed).To(BeFalse())
	g.Expect(out.Response.Result.Message).To(HavePrefix("spec.a.a"))
	g.Expect(out.Response.Result.Message).To(ContainSubstring("nests deeper than 64 levels"))

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(deepReview(10))))
	g.Expect(reached).To(Equal(1), "a shallow review is passed on")
}

// A review over the size limit is refused unread.
func TestGuardRefusesAnOversizedBody(t *testing.T) {
	rec := httptest.NewRecorder()
	Guard(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(make([]byte, MaxReviewBytes+1))))
	NewWithT(t).Expect(rec.Code).To(Equal(http.StatusRequestEntityTooLarge))
}
