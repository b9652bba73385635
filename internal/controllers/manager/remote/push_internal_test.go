package remote

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// The agent chart's push identity may write Assemblages in the tenant
// namespaces the chart made and nothing else: a push into a namespace that
// exists must not touch namespaces at all, and one into a namespace that
// does not must create it.
func TestPushTouchesNamespacesOnlyWhenTheTenantNamespaceIsMissing(t *testing.T) {
	for name, exists := range map[string]bool{"namespace exists": true, "namespace missing": false} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			b := fake.NewClientBuilder().WithScheme(testenv.Scheme)
			if exists {
				b = b.WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}})
			}
			var namespaceRequests []string
			downstream := b.WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*corev1.Namespace); ok {
						namespaceRequests = append(namespaceRequests, "get "+key.Name)
					}
					return c.Get(ctx, key, obj, opts...)
				},
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if _, ok := obj.(*corev1.Namespace); ok {
						namespaceRequests = append(namespaceRequests, "create "+obj.GetName())
						return c.Create(ctx, obj, opts...)
					}
					// What the apiserver's NamespaceLifecycle admission does.
					if err := c.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, &corev1.Namespace{}); err != nil {
						return err
					}
					return c.Create(ctx, obj, opts...)
				},
			}).Build()
			remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge"},
				Spec: fleeetv1.RemoteSpec{ServiceAccountName: "deployer"}}
			pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge", Generation: 1}}

			_, err := (&PushReconciler{}).push(t.Context(), downstream, remote, []*fleeetv1.ProxyAssemblage{pa})
			g.Expect(err).NotTo(HaveOccurred())

			asm := &fleeetv1.Assemblage{}
			g.Expect(downstream.Get(t.Context(), client.ObjectKey{Namespace: "team-a", Name: "team-a"}, asm)).To(Succeed())
			g.Expect(asm.Spec.ServiceAccountName).To(Equal("deployer"))
			if exists {
				g.Expect(namespaceRequests).To(BeEmpty())
			} else {
				g.Expect(namespaceRequests).To(Equal([]string{"create team-a"}))
			}
		})
	}
}
