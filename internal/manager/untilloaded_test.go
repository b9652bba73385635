package manager

import (
	"context"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// A replica whose user policies are not loaded yet refuses every request
// instead of judging it by the built-in policies alone; once they are, the
// policies judge.
func TestAdmissionIsRefusedUntilTheUserPoliciesAreLoaded(t *testing.T) {
	g := NewWithT(t)
	loaded, judged := false, 0
	h := untilLoaded{loaded: func() bool { return loaded }, Handler: admission.HandlerFunc(
		func(context.Context, admission.Request) admission.Response { judged++; return admission.Allowed("") })}

	resp := h.Handle(t.Context(), admission.Request{})
	g.Expect(resp.Allowed).To(BeFalse())
	g.Expect(resp.Result.Code).To(BeEquivalentTo(http.StatusServiceUnavailable))
	g.Expect(resp.Result.Message).To(HavePrefix("user policies not loaded yet"))
	g.Expect(judged).To(BeZero())

	loaded = true
	g.Expect(h.Handle(t.Context(), admission.Request{}).Allowed).To(BeTrue())
	g.Expect(judged).To(Equal(1))
}
