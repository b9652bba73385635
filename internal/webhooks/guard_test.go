package webhooks

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
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
	Guard(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(make([]byte, maxReviewBytes+1))))
	NewWithT(t).Expect(rec.Code).To(Equal(http.StatusRequestEntityTooLarge))
}

// The apiserver mirrors deep fields in managedFields, which come first in
// the object; the refusal names the field the user wrote.
func TestGuardNamesTheWrittenFieldNotItsManagedFieldsMirror(t *testing.T) {
	g := NewWithT(t)
	mirror := `"managedFields":[{"fieldsV1":` + strings.Repeat(`{"f:a":`, 9000) + `{}` + strings.Repeat(`}`, 9000) + `}],`
	review := bytes.Replace(deepReview(9000), []byte(`"metadata":{`), []byte(`"metadata":{`+mirror), 1)
	path, uid, deep := reviewTooDeep(review)
	g.Expect(deep).To(BeTrue())
	g.Expect(uid).To(Equal("1"))
	g.Expect(path).To(Equal("spec" + strings.Repeat(".a", 63)))

	alone := bytes.Replace(deepReview(3), []byte(`"metadata":{`), []byte(`"metadata":{`+mirror), 1)
	path, _, deep = reviewTooDeep(alone)
	g.Expect(deep).To(BeTrue(), "managedFields have a limit of their own")
	g.Expect(path).To(HavePrefix("metadata.managedFields[0].fieldsV1.f:a"))
}
