package registration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/registration"
	"github.com/fleeet-dev/fleeet/internal/credential"
)

// registered issues a token named join in ns, creates the Remote name
// through it with labels, and returns the Remote and a client holding the
// first credential the manager issues it, which the cluster's agent reads.
func registered(t *testing.T, ns string, spec fleeetv1.RegistrationTokenSpec, name string, labels map[string]string) (*fleeetv1.Remote, string) {
	t.Helper()
	issue(t, ns, "join", spec)
	r := registrant(t, ns, "join", name, labels)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fleeetv1.RemoteIdentityName(name)}}
	NewWithT(t).Eventually(func(g Gomega) {
		get(g, secret)
		g.Expect(secret.Data).To(HaveKey(credential.TokenKey))
		get(g, r)
	}, timeout, poll).Should(Succeed())
	return r, string(secret.Data[credential.TokenKey])
}

// identityOf is the metadata every object of a Remote's identity carries.
func identityOf(r *fleeetv1.Remote) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: r.Namespace, Name: fleeetv1.RemoteIdentityName(r.Name)}
}

// renew updates the Remote's heartbeat Lease as c, as the agent does.
func renew(g Gomega, c client.Client, r *fleeetv1.Remote) {
	lease := &coordinationv1.Lease{}
	g.ExpectWithOffset(1, c.Get(context.Background(), client.ObjectKeyFromObject(r), lease)).To(Succeed())
	lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	g.ExpectWithOffset(1, c.Update(context.Background(), lease)).To(Succeed())
}

func TestARegisteredRemoteGetsAnIdentityLimitedToItsOwnObjects(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	r, first := registered(t, ns, fleeetv1.RegistrationTokenSpec{
		RemoteLabels: map[string]string{"tier": "edge"}, FreeLabelKeys: []string{"region"},
	}, "edge-1", map[string]string{"region": "eu", "env": "prod"})
	agent := as(first)
	id := identityOf(r)

	g.Expect(r.Finalizers).To(ContainElement(fleeetv1.RemoteIdentityFinalizer))
	g.Expect(r.Labels).To(Equal(map[string]string{fleeetv1.RegistrationTokenLabel: "join", "region": "eu", "tier": "edge"}),
		"the token's labels, and of the registrant's only those the token frees")
	registeredCond := condition(g, r.Status.Conditions, fleeetv1.RegisteredCondition)
	g.Expect(registeredCond.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(registeredCond.Reason).To(Equal(fleeetv1.ReasonCredentialIssued))
	g.Expect(registeredCond.Message).To(Equal("registered with RegistrationToken join as " + id.Name + "; waiting for the agent to pick up its credential"))
	g.Expect(notes(g, ns, "Remote", "edge-1", fleeetv1.ReasonCredentialIssued)).To(ContainElement(
		"Issued the first credential of " + id.Name + " in Secret " + id.Name))

	sa, role, binding := &corev1.ServiceAccount{ObjectMeta: id}, &rbacv1.Role{ObjectMeta: id}, &rbacv1.RoleBinding{ObjectMeta: id}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-1"}}
	for _, obj := range []client.Object{sa, role, binding, lease} {
		get(g, obj)
		g.Expect(metav1.IsControlledBy(obj, r)).To(BeTrue(), "%T is the Remote's", obj)
		g.Expect(obj.GetLabels()).To(Equal(map[string]string{fleeetv1.RegistrationTokenLabel: "join"}), "%T", obj)
	}
	g.Expect(role.Rules).To(Equal(registration.RemoteRules("edge-1")))
	for _, rule := range role.Rules {
		if rule.Resources[0] == "compiledsyncs" {
			// Keyed names instead: see TestAClusterGetsCompiledSyncsByNameOnly.
			g.Expect(rule.Verbs).To(Equal([]string{"get"}), "never list or watch: %v", rule)
			continue
		}
		g.Expect(rule.ResourceNames).NotTo(BeEmpty(), "every other right is limited by name: %v", rule)
	}
	g.Expect(binding.RoleRef.Name).To(Equal(id.Name))
	g.Expect(binding.Subjects).To(Equal([]rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: id.Name}}))
	g.Expect(lease.Spec.HolderIdentity).To(Equal(ptr.To(id.Name)))
	g.Expect(lease.Spec.RenewTime).To(BeNil(), "the agent has not connected")

	// The credential is the cluster's identity, with rights on its own
	// objects only: "edge-1" is a prefix of "edge-10".
	g.Expect(whoIs(t.Context(), first)).To(Equal(serviceAccount(ns, id.Name)))
	g.Expect(agent.Get(t.Context(), client.ObjectKeyFromObject(r), &fleeetv1.Remote{})).To(Succeed())
	err := agent.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "edge-10"}, &fleeetv1.Remote{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
}

// The first heartbeat, renewed with the cluster's own credential, tells the
// manager the agent holds a credential of its own: the handed-over one is
// withdrawn, and dies with its Secret. The heartbeats after it ask the
// apiserver for nothing more: the Secret is not deleted again.
func TestAnAgentThatConnectsRetiresItsFirstCredential(t *testing.T) {
	t.Parallel() // waits out the apiserver's token cache
	g := NewWithT(t)
	ns := tenant(t)
	r, first := registered(t, ns, fleeetv1.RegistrationTokenSpec{}, "edge-1", nil)
	renew(g, as(first), r)

	secret := &corev1.Secret{ObjectMeta: identityOf(r)}
	g.Eventually(func(g Gomega) {
		get(g, r)
		c := condition(g, r.Status.Conditions, fleeetv1.RegisteredCondition)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonRegistered))
		g.Expect(c.Message).To(HaveSuffix("; the agent holds its own credential"))
		gone(g, secret)
	}, timeout, poll).Should(Succeed())
	rejected(t, first, "the first credential was bound to its Secret")

	deletes := deletesOf(client.ObjectKeyFromObject(secret))
	g.Expect(deletes).To(BeNumerically(">=", 1))
	for range 3 {
		renew(g, cluster.Client, r) // each heartbeat reconciles the Remote
	}
	g.Consistently(func() int32 { return deletesOf(client.ObjectKeyFromObject(secret)) }, 3*time.Second, poll).Should(Equal(deletes),
		"a heartbeat sends no DELETE for the Secret already gone")
}

// A first credential without the label that puts the manager's own Secrets
// in its cache, as an older manager wrote them, is read from the apiserver,
// labelled again, and still withdrawn once the agent connects.
func TestAFirstCredentialWrittenWithoutTheManagersLabelIsStillRetired(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	r, first := registered(t, ns, fleeetv1.RegistrationTokenSpec{}, "edge-1", nil)
	secret := &corev1.Secret{ObjectMeta: identityOf(r)}
	get(g, secret)
	g.Expect(secret.Labels).To(HaveKeyWithValue(fleeetv1.ManagedByLabel, fleeetv1.ManagedByManager))
	unlabel := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+fleeetv1.ManagedByLabel+`":null}}}`))
	g.Expect(cluster.Client.Patch(t.Context(), secret, unlabel)).To(Succeed())
	g.Eventually(func(g Gomega) map[string]string {
		get(g, secret)
		return secret.Labels
	}, timeout, poll).Should(HaveKeyWithValue(fleeetv1.ManagedByLabel, fleeetv1.ManagedByManager), "labelled again")

	g.Expect(cluster.Client.Patch(t.Context(), secret, unlabel)).To(Succeed())
	renew(g, as(first), r)
	g.Eventually(func(g Gomega) { gone(g, secret) }, timeout, poll).Should(Succeed())
}

// Deleting a Remote revokes its cluster at once: the identity goes first,
// which invalidates every token the agent minted for itself.
func TestDeletingARegisteredRemoteRevokesItsCluster(t *testing.T) {
	t.Parallel() // waits out the apiserver's token cache
	g := NewWithT(t)
	ns := tenant(t)
	r, first := registered(t, ns, fleeetv1.RegistrationTokenSpec{}, "edge-1", nil)
	id := identityOf(r)
	own, err := credential.Mint(t.Context(), as(first), ns, id.Name, credential.Lifetime, nil)
	g.Expect(err).NotTo(HaveOccurred(), "the cluster exchanges the first credential for its own")
	g.Expect(whoIs(t.Context(), own.Value)).To(Equal(serviceAccount(ns, id.Name)))

	g.Expect(cluster.Client.Delete(t.Context(), r)).To(Succeed())
	g.Eventually(func(g Gomega) {
		gone(g, r, &corev1.ServiceAccount{ObjectMeta: id}, &rbacv1.Role{ObjectMeta: id}, &rbacv1.RoleBinding{ObjectMeta: id},
			&corev1.Secret{ObjectMeta: id}, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: r.Name}})
	}, timeout, poll).Should(Succeed())
	rejected(t, own.Value, "the cluster's own token dies with its identity")
	g.Expect(notes(g, ns, "Remote", "edge-1", "Revoked")).To(ContainElement(
		"Deleted cluster identity " + id.Name + ": its tokens no longer authenticate"))
}

func TestARemoteNotCreatedThroughAnExistingTokenIsNotRegistered(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	byHand := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-hand"}}
	g.Expect(cluster.Client.Create(t.Context(), byHand)).To(Succeed())
	orphan := registrant(t, ns, "never-issued", "orphan", nil)

	for _, r := range []*fleeetv1.Remote{byHand, orphan} {
		g.Eventually(func(g Gomega) {
			get(g, r)
			c := condition(g, r.Status.Conditions, fleeetv1.RegisteredCondition)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(fleeetv1.ReasonNotRegistered))
		}, timeout, poll).Should(Succeed())
		g.Expect(r.Finalizers).To(BeEmpty(), r.Name)
		gone(g, &corev1.ServiceAccount{ObjectMeta: identityOf(r)})
	}
}

// A Lease someone else made under a Remote's name must not become the
// cluster's heartbeat, nor get the cluster rights on it.
func TestARegisteredRemoteAdoptsNoLeaseItDoesNotControl(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	foreign := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone"), RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))}}
	g.Expect(cluster.Client.Create(t.Context(), foreign)).To(Succeed())
	issue(t, ns, "join", fleeetv1.RegistrationTokenSpec{})
	r := registrant(t, ns, "join", "edge-1", nil)

	g.Eventually(func(g Gomega) {
		get(g, r)
		c := condition(g, r.Status.Conditions, fleeetv1.RegisteredCondition)
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonLeaseConflict))
		g.Expect(c.Message).To(HavePrefix("Lease " + ns + "/edge-1 exists and is not controlled by this Remote"))
	}, timeout, poll).Should(Succeed())
	gone(g, &corev1.ServiceAccount{ObjectMeta: identityOf(r)}, &corev1.Secret{ObjectMeta: identityOf(r)})
	get(g, foreign)
	g.Expect(foreign.OwnerReferences).To(BeEmpty(), "the foreign Lease is left alone")

	g.Expect(cluster.Client.Delete(t.Context(), foreign)).To(Succeed())
	g.Eventually(func(g Gomega) {
		get(g, foreign)
		g.Expect(metav1.IsControlledBy(foreign, r)).To(BeTrue())
		g.Expect(foreign.Spec.RenewTime).To(BeNil())
		get(g, r)
		g.Expect(condition(g, r.Status.Conditions, fleeetv1.RegisteredCondition).Reason).To(Equal(fleeetv1.ReasonCredentialIssued))
	}, timeout, poll).Should(Succeed())
}

// After the delivery deadline the first credential is no longer offered:
// the Remote says so and how to recover.
func TestAFirstCredentialNotPickedUpInTimeIsWithdrawn(t *testing.T) {
	g := NewWithT(t)
	registeredAt := time.Now().Add(-credential.DeliveryDeadline - time.Minute)
	tok := tokenAt(registeredAt.Add(-time.Minute), time.Hour, 1)
	tok.Name = "join"
	r := remoteAt("edge-1", "join", registeredAt)
	tok.Status.Registered = []fleeetv1.Registration{{Name: r.Name, UID: r.UID, Time: metav1.NewTime(registeredAt)}}
	offered := &corev1.Secret{ObjectMeta: identityOf(r), Data: map[string][]byte{credential.TokenKey: []byte("first")}}
	c, recorder := stored(tok, r, offered)

	_, err := (&registration.RemoteReconciler{Client: c, Recorder: recorder}).Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(r)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Get(t.Context(), client.ObjectKeyFromObject(r), r)).To(Succeed())
	cond := condition(g, r.Status.Conditions, fleeetv1.RegisteredCondition)
	g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(cond.Reason).To(Equal(fleeetv1.ReasonCredentialNotPickedUp))
	g.Expect(cond.Message).To(HaveSuffix("but no agent connected within 10m0s; delete this Remote and register the cluster again"))
	err = c.Get(t.Context(), client.ObjectKeyFromObject(offered), offered)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the first credential is withdrawn, got %v", err)
}

// A cluster asks for labels (its Upstream's spec.labels) in its Remote's
// status; the manager sets only those under keys the registration freed,
// recorded on the Remote so they still govern once the token is gone, and
// refuses the rest by name, leaving the Remote's labels as they are.
func TestAClusterRelabelsItsRemoteOnlyWhereItsRegistrationFreesIt(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	r, first := registered(t, ns, fleeetv1.RegistrationTokenSpec{
		RemoteLabels: map[string]string{"tier": "edge"}, FreeLabelKeys: []string{"region", "tier", "zone"},
	}, "edge-1", map[string]string{"region": "eu"})
	g.Expect(r.Annotations).To(HaveKeyWithValue(fleeetv1.FreeLabelKeysAnnotation, "region,zone"), "tier is the token's to set")
	// request replaces the labels the cluster requests, as its agent
	// does with its own credential.
	agent := as(first)
	request := func(labels map[string]string) {
		raw, err := json.Marshal([]map[string]any{{"op": "add", "path": "/status/requestedLabels", "value": labels}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(agent.Status().Patch(t.Context(), r, client.RawPatch(types.JSONPatchType, raw))).To(Succeed())
	}
	// The tenant labels the Remote too; the cluster's requests leave that be.
	g.Expect(cluster.Client.Patch(t.Context(), r, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"owner":"alice"}}}`)))).To(Succeed())
	applied := func(g Gomega, status metav1.ConditionStatus) *metav1.Condition {
		get(g, r)
		c := condition(g, r.Status.Conditions, fleeetv1.LabelsAppliedCondition)
		g.Expect(c.Status).To(Equal(status))
		return c
	}
	before := map[string]string{fleeetv1.RegistrationTokenLabel: "join", "tier": "edge", "region": "eu", "owner": "alice"}

	long := strings.Repeat("k", 300)
	request(map[string]string{"region": "eu", fleeetv1.RegistrationTokenLabel: "other", "tier": "core", "owner": "mallory", "env": "prod",
		"zone": strings.Repeat("a", 64), long: "x"})
	g.Eventually(func(g Gomega) {
		c := applied(g, metav1.ConditionFalse)
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonLabelsRefused))
		for _, want := range []string{
			`labels["fleeet.dev/registration-token"]: keys under fleeet.dev/ are set only by the fleet manager`,
			`labels["tier"]: not a key the Remote's registration freed (region,zone)`,
			`labels["owner"]: not a key`, `labels["env"]: not a key`,
			`labels["zone"]: not a valid label: must be no more than 63 bytes`,
			fmt.Sprintf(`labels[%q]: not a key`, long[:80]+"..."),
		} {
			g.Expect(c.Message).To(ContainSubstring(want))
		}
		g.Expect(c.Message).NotTo(ContainSubstring(long), "a hostile key is not repeated whole")
	}, timeout, poll).Should(Succeed())
	g.Expect(r.Labels).To(Equal(before), "nothing refused touches the Remote")

	// The Upstream's labels are edited: the freed keys follow.
	request(map[string]string{"region": "us", "zone": "a"})
	g.Eventually(func(g Gomega) {
		g.Expect(applied(g, metav1.ConditionTrue).Reason).To(Equal(fleeetv1.ReasonLabelsApplied))
		g.Expect(r.Labels).To(Equal(map[string]string{fleeetv1.RegistrationTokenLabel: "join", "tier": "edge", "region": "us", "zone": "a", "owner": "alice"}))
	}, timeout, poll).Should(Succeed())

	// The token is deleted: what the registration freed still governs.
	g.Expect(cluster.Client.Delete(t.Context(), &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "join"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		gone(g, &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "join"}})
	}, timeout, poll).Should(Succeed())
	request(map[string]string{"zone": "b", "tier": "core"})
	g.Eventually(func(g Gomega) {
		c := applied(g, metav1.ConditionFalse)
		g.Expect(c.Message).To(Equal(`refused labels the cluster requests (status.requestedLabels): labels["tier"]: not a key the Remote's registration freed (region,zone): the RegistrationToken's labels, and labels it does not free, are not the cluster's to choose`))
		g.Expect(r.Labels).To(Equal(map[string]string{fleeetv1.RegistrationTokenLabel: "join", "tier": "edge", "zone": "b", "owner": "alice"}),
			"region, no longer requested, is removed; tier stays the token's")
	}, timeout, poll).Should(Succeed())
}
