package webhooks

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// A namespace created a moment before the object being judged may not be in
// the cache yet; the look-up must then ask the apiserver instead of failing
// the request.
func TestANamespaceTheCacheHasNotSeenIsReadLive(t *testing.T) {
	created := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-new", Labels: map[string]string{"team": "a"}}}
	p := &Policies{
		Reader:     fake.NewClientBuilder().Build(),
		LiveReader: fake.NewClientBuilder().WithObjects(created).Build(),
	}
	ns, err := p.namespace(context.Background(), "tenant-new")
	if err != nil {
		t.Fatalf("looking up a namespace only the apiserver knows: %v", err)
	}
	if ns.Labels["team"] != "a" {
		t.Fatalf("labels = %v, want the live namespace's", ns.Labels)
	}
	if _, err := p.namespace(context.Background(), "tenant-gone"); !apierrors.IsNotFound(err) {
		t.Fatalf("a namespace that does not exist: err = %v, want NotFound", err)
	}
}

// Anyone who reaches the webhook port can send any kind and operation:
// however many distinct values arrive, the metric series stay a bounded
// set.
func TestForgedKindsAndOperationsLeaveMetricSeriesBounded(t *testing.T) {
	g := NewWithT(t)
	p := &Policies{Reader: fake.NewClientBuilder().Build(), LiveReader: fake.NewClientBuilder().Build(), Timeout: time.Second}
	send := func(kind, op string) {
		p.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Kind: metav1.GroupVersionKind{Group: "fleeet.dev", Version: "v1alpha1", Kind: kind}, Operation: admissionv1.Operation(op), Namespace: "nowhere"}})
	}
	send("Module", "CREATE")
	for i := range 200 {
		send(fmt.Sprintf("Kind%d", i), fmt.Sprintf("OP%d", i))
	}
	before := testutil.CollectAndCount(requests) + testutil.CollectAndCount(evaluation)
	for i := range 500 {
		send(fmt.Sprintf("Other%d", i), fmt.Sprintf("X%d", i))
	}
	g.Expect(testutil.CollectAndCount(requests) + testutil.CollectAndCount(evaluation)).To(Equal(before))
	g.Expect(testutil.CollectAndCount(requests)).To(BeNumerically("<=", 2*len(knownKinds)*(len(knownOperations)+1)))
}
