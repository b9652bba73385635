package registration_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/registration"
)

// recorded is a Remote created a minute ago through the token join, which
// recorded it, and that token.
func recorded() (*fleeetv1.Remote, *fleeetv1.RegistrationToken) {
	now := time.Now()
	tok := tokenAt(now.Add(-2*time.Minute), time.Hour, 1)
	tok.Name = "join"
	r := remoteAt("edge-1", "join", now.Add(-time.Minute))
	tok.Status.Registered = []fleeetv1.Registration{{Name: r.Name, UID: r.UID, Time: metav1.NewTime(now.Add(-time.Minute))}}
	return r, tok
}

// controlledBy is the owner reference a controller sets.
// revoked is recorded's Remote being deleted, still held by its finalizer.
func revoked() (*fleeetv1.Remote, *fleeetv1.RegistrationToken) {
	r, tok := recorded()
	r.Finalizers = []string{fleeetv1.RemoteIdentityFinalizer}
	r.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	return r, tok
}

func controlledBy(r *fleeetv1.Remote) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: fleeetv1.GroupVersion.String(), Kind: "Remote", Name: r.Name, UID: r.UID, Controller: ptr.To(true)}}
}

// A ServiceAccount someone else created under the identity's name is never
// adopted: tokens it already minted would carry the cluster's rights.
func TestAnIdentityIsNeverAdoptedFromAServiceAccountSomeoneElseMade(t *testing.T) {
	g := NewWithT(t)
	r, tok := recorded()
	planted := &corev1.ServiceAccount{ObjectMeta: identityOf(r)}
	planted.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	c, recorder := stored(r, tok, planted)

	_, err := (&registration.RemoteReconciler{Client: c, Recorder: recorder}).Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(r)})
	g.Expect(err).To(MatchError("ServiceAccount team-a/fleeet-remote-edge-1 exists and was not created for edge-1; delete it or rename the owner"))
	g.Expect(c.Get(t.Context(), client.ObjectKeyFromObject(planted), planted)).To(Succeed())
	g.Expect(planted.OwnerReferences).To(BeEmpty())
	for _, obj := range []client.Object{&rbacv1.Role{ObjectMeta: identityOf(r)}, &corev1.Secret{ObjectMeta: identityOf(r)}} {
		err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no rights and no credential for it: %T, got %v", obj, err)
	}
}

// Deleting a Remote deletes what its identity controls and nothing else,
// then lets the Remote go.
func TestRemovingAnIdentityLeavesWhatItDoesNotControl(t *testing.T) {
	g := NewWithT(t)
	r, tok := revoked()
	role := &rbacv1.Role{ObjectMeta: identityOf(r)}
	role.OwnerReferences = controlledBy(r)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name, OwnerReferences: controlledBy(r)}}
	foreign := &corev1.ServiceAccount{ObjectMeta: identityOf(r)}
	c, recorder := stored(r, tok, role, lease, foreign)

	_, err := (&registration.RemoteReconciler{Client: c, Recorder: recorder}).Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(r)})
	g.Expect(err).NotTo(HaveOccurred())
	for _, obj := range []client.Object{role, lease, r} {
		err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T deleted, got %v", obj, err)
	}
	g.Expect(c.Get(t.Context(), client.ObjectKeyFromObject(foreign), foreign)).To(Succeed(), "not the Remote's to delete")
	g.Expect(recorder.Events).To(Receive(HavePrefix("Normal Revoked Deleted cluster identity fleeet-remote-edge-1")))
}

// staleCache is a client whose reads miss the identity's ServiceAccount,
// Role and RoleBinding, as a cache that has not caught up with the
// apiserver does.
type staleCache struct {
	client.Client
	hidden string
}

func (s staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, secret := obj.(*corev1.Secret); key.Name == s.hidden && !secret {
		return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// An identity the cache has not seen yet is brought in line through the
// apiserver at once, not after the controller's error backoff; and a
// ServiceAccount someone else made is still refused when read that way.
func TestAnIdentityTheCacheHasNotSeenIsWrittenThroughTheAPIServer(t *testing.T) {
	g := NewWithT(t)
	r, tok := recorded()
	sa := &corev1.ServiceAccount{ObjectMeta: identityOf(r)}
	sa.OwnerReferences = controlledBy(r)
	role := &rbacv1.Role{ObjectMeta: identityOf(r), Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}
	role.OwnerReferences = controlledBy(r)
	live, recorder := stored(r, tok, sa, role)
	remotes := &registration.RemoteReconciler{Client: staleCache{Client: live, hidden: identityOf(r).Name}, APIReader: live, Recorder: recorder}

	_, err := remotes.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(r)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(live.Get(t.Context(), client.ObjectKeyFromObject(role), role)).To(Succeed())
	g.Expect(role.Rules).To(Equal(registration.RemoteRules(r.Name)))

	remotes.APIReader = nil
	role.Rules = nil
	g.Expect(live.Update(t.Context(), role)).To(Succeed())
	_, err = remotes.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(r)})
	g.Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "without an API reader the next reconcile has to: %v", err)

	planted := &corev1.ServiceAccount{ObjectMeta: identityOf(r)}
	planted.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	live, recorder = stored(r, tok, planted)
	remotes = &registration.RemoteReconciler{Client: staleCache{Client: live, hidden: identityOf(r).Name}, APIReader: live, Recorder: recorder}
	_, err = remotes.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(r)})
	g.Expect(err).To(MatchError(ContainSubstring("exists and was not created for edge-1")))
	g.Expect(live.Get(t.Context(), client.ObjectKeyFromObject(planted), planted)).To(Succeed())
	g.Expect(planted.OwnerReferences).To(BeEmpty(), "nothing of the first try leaks into the second")
}

// Creating what the cache has not seen but the apiserver holds (the token's
// Secret, a Remote's Lease and first credential) yields what the apiserver
// holds, for the caller to judge, and none of what the caller meant to
// create; without an API reader, the AlreadyExists error.
func TestCreatingWhatTheCacheHasNotSeenReadsItFromTheAPIServer(t *testing.T) {
	g := NewWithT(t)
	r, tok := recorded()
	held := &corev1.Secret{ObjectMeta: identityOf(r), Data: map[string][]byte{"token": []byte("someone else's")}}
	live, _ := stored(r, tok, held)
	mine := func() *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: identityOf(r)}
		s.OwnerReferences = controlledBy(r)
		return s
	}

	got := mine()
	g.Expect(registration.Create(t.Context(), live, live, got)).To(Succeed())
	g.Expect(got.Data).To(Equal(held.Data))
	g.Expect(got.OwnerReferences).To(BeEmpty(), "nothing the caller set survives")
	g.Expect(metav1.IsControlledBy(got, r)).To(BeFalse())

	err := registration.Create(t.Context(), live, nil, mine())
	g.Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "without an API reader: %v", err)
}

// A revoked cluster's ServiceAccount is deleted even when the cache has not
// seen it yet: its tokens must stop authenticating at once.
func TestRevokingDeletesAServiceAccountTheCacheHasNotSeen(t *testing.T) {
	g := NewWithT(t)
	r, tok := revoked()
	sa := &corev1.ServiceAccount{ObjectMeta: identityOf(r)}
	sa.OwnerReferences = controlledBy(r)
	live, recorder := stored(r, tok, sa)
	remotes := &registration.RemoteReconciler{Client: staleCache{Client: live, hidden: identityOf(r).Name}, APIReader: live, Recorder: recorder}

	_, err := remotes.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(r)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apierrors.IsNotFound(live.Get(t.Context(), client.ObjectKeyFromObject(sa), sa))).To(BeTrue(), "the ServiceAccount is gone")
}
