package webhooks

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	h := (&Policies{}).Guard(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
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
	(&Policies{}).Guard(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(make([]byte, maxReviewBytes+1))))
	NewWithT(t).Expect(rec.Code).To(Equal(http.StatusRequestEntityTooLarge))
}

// The apiserver mirrors deep fields in managedFields, which come first in
// the object; the refusal names the field the user wrote.
func TestGuardNamesTheWrittenFieldNotItsManagedFieldsMirror(t *testing.T) {
	g := NewWithT(t)
	mirror := `"managedFields":[{"fieldsV1":` + strings.Repeat(`{"f:a":`, 9000) + `{}` + strings.Repeat(`}`, 9000) + `}],`
	review := bytes.Replace(deepReview(9000), []byte(`"metadata":{`), []byte(`"metadata":{`+mirror), 1)
	p := &Policies{}
	s := p.scanReview(review)
	g.Expect(s.breach).NotTo(BeNil())
	g.Expect(s.uid).To(Equal("1"))
	g.Expect(s.breach.path).To(Equal("spec" + strings.Repeat(".a", 63)))

	alone := bytes.Replace(deepReview(3), []byte(`"metadata":{`), []byte(`"metadata":{`+mirror), 1)
	s = p.scanReview(alone)
	g.Expect(s.breach).NotTo(BeNil(), "managedFields have a limit of their own")
	g.Expect(s.breach.path).To(HavePrefix("metadata.managedFields[0].fieldsV1.f:a"))
}

// A review whose object holds more nodes than the limit is answered by the
// guard, naming the field, and never reaches the handler that would decode
// it; one just under the limit is passed on.
func TestGuardDeniesAReviewWithTooManyNodesBeforeDecodingIt(t *testing.T) {
	g := NewWithT(t)
	reached := 0
	h := (&Policies{}).Guard(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
	list := func(n int) []byte { return []byte(`{"data":[0` + strings.Repeat(",0", n-1) + `]}`) }

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(floodReview(t, "team-a", list(DefaultMaxObjectNodes), []byte(`{"f:data":{}}`)))))
	g.Expect(reached).To(BeZero(), "the review reached the decoding handler")
	out := &admissionv1.AdmissionReview{}
	g.Expect(json.Unmarshal(rec.Body.Bytes(), out)).To(Succeed())
	g.Expect(out.Response.UID).To(BeEquivalentTo("1"))
	g.Expect(out.Response.Allowed).To(BeFalse())
	g.Expect(out.Response.Result.Code).To(BeEquivalentTo(http.StatusForbidden))
	g.Expect(out.Response.Result.Message).To(HavePrefix(fmt.Sprintf("spec.sync.package.helm.values.data: the object holds more than %d JSON nodes", DefaultMaxObjectNodes)))

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(floodReview(t, "team-a", list(DefaultMaxObjectNodes-100), []byte(`{"f:data":{}}`)))))
	g.Expect(reached).To(Equal(1), "a review within the limit is passed on")
}

// The object and the old object are each held to the limit, and so is what
// a forged review carries around them.
func TestGuardHoldsEveryPartOfAReviewToTheNodeLimit(t *testing.T) {
	g := NewWithT(t)
	p := &Policies{MaxObjectNodes: 100}
	small := `{"metadata":{"name":"m"},"spec":{}}`
	big := `{"metadata":{"name":"m"},"spec":{"values":[0` + strings.Repeat(",0", 200) + `]}}`
	review := func(object, old, extra string) []byte {
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",` +
			`"kind":{"group":"fleeet.dev","version":"v1alpha1","kind":"Module"},"namespace":"team-a","operation":"UPDATE",` +
			`"userInfo":{"username":"alice","extra":{"x":` + extra + `}},"object":` + object + `,"oldObject":` + old + `}}`)
	}
	refusal := func(review []byte) string {
		s := p.scanReview(review)
		g.Expect(s.breach).NotTo(BeNil(), "the review was not refused")
		return s.breach.refusal()
	}
	g.Expect(p.scanReview(review(small, small, `["a"]`)).breach).To(BeNil())
	g.Expect(refusal(review(big, small, `["a"]`))).To(HavePrefix("spec.values: the object holds more than 100 JSON nodes"))
	g.Expect(refusal(review(small, big, `["a"]`))).To(HavePrefix("spec.values: the object as stored (the update's old object) holds more than 100"))
	g.Expect(refusal(review(small, small, `["a"`+strings.Repeat(`,"a"`, 200)+`]`))).To(HavePrefix("request.userInfo.extra.x: the review holds, outside its objects, more than 100 JSON nodes"))
}

// Plans and CompiledSyncs, which the manager compiles from Modules it
// judged, may hold the plan size limit's worth of nodes more: the webhook
// never refuses for its nodes a plan the size policy admits.
func TestGuardLetsPlansHoldWhatThePlanSizeLimitAdmits(t *testing.T) {
	g := NewWithT(t)
	p := &Policies{MaxObjectNodes: 100, MaxPlanBytes: 1000}
	plan := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",` +
		`"kind":{"group":"fleeet.dev","version":"v1alpha1","kind":"ProxyAssemblage"},"namespace":"team-a","operation":"UPDATE",` +
		`"object":{"spec":{"assemblage":{"syncs":[0` + strings.Repeat(",0", 900) + `]}}}}}`)
	g.Expect(p.scanReview(plan).breach).To(BeNil())
	module := bytes.Replace(plan, []byte(`"kind":"ProxyAssemblage"`), []byte(`"kind":"Module"`), 1)
	g.Expect(p.scanReview(module).breach).NotTo(BeNil())
}
