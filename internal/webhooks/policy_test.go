package webhooks

import (
	"context"
	"testing"

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
