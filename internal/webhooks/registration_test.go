package webhooks

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// The look-up gives the registration policy the token, the UID of the
// ServiceAccount the manager made for it (not of one made under its name by
// someone else), and every Remote created through it, recorded or not.
func TestARegistrantsLookUpFindsItsTokenIdentityAndRemotes(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, fleeetv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	tok := &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "edge", UID: "tok-1"}}
	controlled := []metav1.OwnerReference{{APIVersion: fleeetv1.GroupVersion.String(), Kind: "RegistrationToken",
		Name: "edge", UID: "tok-1", Controller: ptr.To(true)}}
	remote := func(name, token string) *fleeetv1.Remote {
		return &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{fleeetv1.RegistrationTokenLabel: token}}}
	}
	others := []client.Object{tok, remote("a", "edge"), remote("b", "edge"), remote("c", "other"), pullRemoteIn("t", "d")}

	for name, tc := range map[string]struct {
		sa       *corev1.ServiceAccount
		identity any
	}{
		"the token's own identity": {
			sa:       &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: fleeetv1.RegistrationIdentityName("edge"), UID: "sa-1", OwnerReferences: controlled}},
			identity: map[string]any{"uid": types.UID("sa-1")},
		},
		"a ServiceAccount someone else made under its name": {
			sa: &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: fleeetv1.RegistrationIdentityName("edge"), UID: "sa-2"}},
		},
		"a retired identity": {},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			objs := others
			if tc.sa != nil {
				objs = append(objs[:len(objs):len(objs)], tc.sa)
			}
			reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
			into := map[string]any{}
			g.Expect((&Registrations{Reader: reader}).lookUp(context.Background(), "t", "edge", into)).To(Succeed())
			g.Expect(into["registrationToken"]).To(HaveField("Name", "edge"))
			if tc.identity == nil {
				g.Expect(into).NotTo(HaveKey("registrationIdentity"))
			} else {
				g.Expect(into["registrationIdentity"]).To(Equal(tc.identity))
			}
			g.Expect(into["registrationRemotes"]).To(ConsistOf(
				map[string]any{"name": "a", "uid": types.UID("uid-a")},
				map[string]any{"name": "b", "uid": types.UID("uid-b")},
			))
		})
	}

	t.Run("a deleted token", func(t *testing.T) {
		g := NewWithT(t)
		into := map[string]any{}
		reader := fake.NewClientBuilder().WithScheme(scheme).Build()
		g.Expect((&Registrations{Reader: reader}).lookUp(context.Background(), "t", "edge", into)).To(Succeed())
		g.Expect(into).To(BeEmpty())
	})
}

func pullRemoteIn(ns, name string) *fleeetv1.Remote {
	return &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}
