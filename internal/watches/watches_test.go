package watches_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/watches"
)

// enqueued returns the requests h enqueues when o is created.
func enqueued(h handler.EventHandler, o client.Object) []reconcile.Request {
	q := &controllertest.Queue{TypedInterface: workqueue.NewTyped[reconcile.Request]()}
	defer q.ShutDown()
	h.Create(context.Background(), event.CreateEvent{Object: o}, q)
	var reqs []reconcile.Request
	for q.Len() > 0 {
		r, _ := q.Get()
		reqs = append(reqs, r)
		q.Done(r)
	}
	return reqs
}

func request(ns, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}
}

func scheme(g *WithT) *runtime.Scheme {
	s := runtime.NewScheme()
	g.Expect(corev1.AddToScheme(s)).To(Succeed())
	g.Expect(fleeetv1.AddToScheme(s)).To(Succeed())
	return s
}

func TestSameNameEnqueuesExactlyTheObjectOfTheChangedObjectsNamespaceAndName(t *testing.T) {
	g := NewWithT(t)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "cluster-1"}}
	g.Expect(enqueued(watches.SameName, lease)).To(ConsistOf(request("team-a", "cluster-1")))
}

const secretIndex = "spec.tokenSecretRef.name"

func upstream(ns, name, secret string) *fleeetv1.Upstream {
	up := &fleeetv1.Upstream{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if secret != "" {
		up.Spec.TokenSecretRef = &fleeetv1.LocalObjectReference{Name: secret}
	}
	return up
}

func newUpstreamList() client.ObjectList { return &fleeetv1.UpstreamList{} }

func TestReferrersEnqueueTheObjectsInTheNamespaceWhoseIndexNamesTheChangedObject(t *testing.T) {
	g := NewWithT(t)
	c := fake.NewClientBuilder().WithScheme(scheme(g)).
		WithObjects(
			upstream("team-a", "one", "token"),
			upstream("team-a", "two", "token"),
			upstream("team-a", "other-secret", "another-token"),
			upstream("team-a", "no-secret", ""),
			upstream("team-b", "same-secret-name-elsewhere", "token"),
		).
		WithIndex(&fleeetv1.Upstream{}, secretIndex, func(o client.Object) []string {
			if ref := o.(*fleeetv1.Upstream).Spec.TokenSecretRef; ref != nil {
				return []string{ref.Name}
			}
			return nil
		}).
		Build()
	h := watches.Referrers(c, newUpstreamList, secretIndex)

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "token"}}
	g.Expect(enqueued(h, secret)).To(ConsistOf(request("team-a", "one"), request("team-a", "two")))

	unreferenced := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "unused"}}
	g.Expect(enqueued(h, unreferenced)).To(BeEmpty())
}

func TestReferrersWithoutAnIndexEnqueueEveryObjectInTheNamespace(t *testing.T) {
	g := NewWithT(t)
	c := fake.NewClientBuilder().WithScheme(scheme(g)).
		WithObjects(
			&fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "app"}},
			&fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "db"}},
			&fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "app"}},
		).
		Build()
	h := watches.Referrers(c, func() client.ObjectList { return &fleeetv1.ModuleList{} }, "")

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "anything"}}
	g.Expect(enqueued(h, cm)).To(ConsistOf(request("team-a", "app"), request("team-a", "db")))
}
