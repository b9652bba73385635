package registration_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/registration"
	"github.com/fleeet-dev/fleeet/internal/credential"
)

// tokenAt is a RegistrationToken created at created, allowing max
// registrations for ttl.
func tokenAt(created time.Time, ttl time.Duration, max int32) *fleeetv1.RegistrationToken {
	return &fleeetv1.RegistrationToken{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "batch", UID: "token-uid", CreationTimestamp: metav1.NewTime(created)},
		Spec:       fleeetv1.RegistrationTokenSpec{TTL: &metav1.Duration{Duration: ttl}, MaxRegistrations: max},
	}
}

// remoteAt is a Remote created at created through the token named token.
func remoteAt(name, token string, created time.Time) *fleeetv1.Remote {
	return &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(name + "-uid"),
		CreationTimestamp: metav1.NewTime(created), Labels: map[string]string{fleeetv1.RegistrationTokenLabel: token}}}
}

func registeredNames(tok *fleeetv1.RegistrationToken) []string {
	var names []string
	for _, r := range tok.Status.Registered {
		names = append(names, r.Name)
	}
	return names
}

// The token's record decides which Remotes become clusters; the
// apiserver's timestamps have one-second precision, so ties go by name.
// The manager here has no management URL, so the reconcile stops after
// recording and no token is minted.
func TestATokenRecordsRegistrationsInCreationOrderUpToItsLimit(t *testing.T) {
	t0 := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	at := func(seconds int) time.Time { return t0.Add(time.Duration(seconds) * time.Second) }
	deleting := remoteAt("deleting", "batch", at(1))
	deleting.DeletionTimestamp, deleting.Finalizers = &metav1.Time{Time: at(5)}, []string{"test/hold"}
	for name, tc := range map[string]struct {
		max      int32
		recorded []string
		remotes  []*fleeetv1.Remote
		want     []string
	}{
		"in creation order, not by name": {2, nil, []*fleeetv1.Remote{
			remoteAt("c", "batch", at(1)), remoteAt("a", "batch", at(3)), remoteAt("b", "batch", at(2))}, []string{"c", "b"}},
		"created in the same second, by name": {2, nil, []*fleeetv1.Remote{
			remoteAt("c", "batch", at(1)), remoteAt("a", "batch", at(1)), remoteAt("b", "batch", at(1))}, []string{"a", "b"}},
		"after what it recorded before, in the room left": {3, []string{"z"}, []*fleeetv1.Remote{
			remoteAt("z", "batch", at(9)), remoteAt("y", "batch", at(2)), remoteAt("x", "batch", at(3)), remoteAt("w", "batch", at(4))},
			[]string{"z", "y", "x"}},
		"nothing once full": {1, []string{"z"}, []*fleeetv1.Remote{remoteAt("z", "batch", at(9)), remoteAt("y", "batch", at(1))}, []string{"z"}},
		"not a Remote created after the token expired": {5, nil, []*fleeetv1.Remote{
			remoteAt("late", "batch", t0.Add(time.Hour)), remoteAt("early", "batch", at(1))}, []string{"early"}},
		"not a Remote being deleted": {5, nil, []*fleeetv1.Remote{deleting, remoteAt("kept", "batch", at(2))}, []string{"kept"}},
		"not another token's Remote": {5, nil, []*fleeetv1.Remote{
			remoteAt("theirs", "other", at(1)), remoteAt("ours", "batch", at(2))}, []string{"ours"}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			tok := tokenAt(t0, time.Hour, tc.max)
			for _, name := range tc.recorded {
				tok.Status.Registered = append(tok.Status.Registered,
					fleeetv1.Registration{Name: name, UID: types.UID(name + "-uid"), Time: metav1.NewTime(at(10))})
			}
			objs := []client.Object{tok}
			for _, r := range tc.remotes {
				objs = append(objs, r)
			}
			c, recorder := stored(objs...)
			tokens := &registration.TokenReconciler{Client: c, Recorder: recorder}
			_, err := tokens.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tok)})
			g.Expect(err).NotTo(HaveOccurred())

			g.Expect(c.Get(t.Context(), client.ObjectKeyFromObject(tok), tok)).To(Succeed())
			g.Expect(registeredNames(tok)).To(Equal(tc.want))
			g.Expect(tok.Status.Registrations).To(BeEquivalentTo(len(tc.want)))
			g.Expect(len(recorder.Events)).To(Equal(len(tc.want)-len(tc.recorded)), "one event per new registration")
			// Without a management URL agents would not know where to go.
			ready := condition(g, tok.Status.Conditions, fleeetv1.StalledCondition)
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(ready.Reason).To(Equal(fleeetv1.ReasonManagementURLUnset))
		})
	}
}

func TestRefusalSaysWhyATokenWillNeverRecordARemote(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	full := tokenAt(t0, time.Hour, 1)
	full.Status.Registered = []fleeetv1.Registration{{Name: "first", UID: "first-uid"}}
	for name, tc := range map[string]struct {
		tok     *fleeetv1.RegistrationToken
		created time.Time
		want    string
	}{
		"room left and in time":         {tokenAt(t0, time.Hour, 1), t0.Add(time.Minute), ""},
		"used up":                       {full, t0.Add(time.Minute), "RegistrationToken batch is used up: 1 of 1 registrations"},
		"created the moment it expired": {tokenAt(t0, time.Hour, 1), t0.Add(time.Hour), "created after RegistrationToken batch expired at 2030-01-01T13:00:00Z"},
		"late counts before used up":    {full, t0.Add(2 * time.Hour), "created after RegistrationToken batch expired at 2030-01-01T13:00:00Z"},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(registration.Refusal(tc.tok, remoteAt("edge", "batch", tc.created))).To(Equal(tc.want))
		})
	}
}

func TestATokenExpiresItsTTLAfterItWasCreated(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	g.Expect(tokenAt(t0, 5*time.Minute, 1).ExpiresAt()).To(Equal(t0.Add(5 * time.Minute)))
	unset := tokenAt(t0, 0, 1)
	unset.Spec.TTL = nil
	g.Expect(unset.ExpiresAt()).To(Equal(t0.Add(fleeetv1.DefaultRegistrationTokenTTL)))
}

// An empty resourceNames would grant every Secret of the namespace.
func TestARegistrationIdentityReadsOnlyTheCredentialsItWaitsFor(t *testing.T) {
	createRemotes := rbacv1.PolicyRule{APIGroups: []string{fleeetv1.GroupVersion.Group}, Resources: []string{"remotes"}, Verbs: []string{"create"}}
	readSecrets := func(names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: names, Verbs: []string{"get"}}
	}
	for name, tc := range map[string]struct {
		mayRegister bool
		secrets     []string
		want        []rbacv1.PolicyRule
	}{
		"usable, nothing to deliver":  {true, nil, []rbacv1.PolicyRule{createRemotes}},
		"usable, delivering":          {true, []string{"fleeet-remote-a"}, []rbacv1.PolicyRule{createRemotes, readSecrets("fleeet-remote-a")}},
		"expired, delivering":         {false, []string{"fleeet-remote-a", "fleeet-remote-b"}, []rbacv1.PolicyRule{readSecrets("fleeet-remote-a", "fleeet-remote-b")}},
		"expired, nothing to deliver": {false, nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(registration.RegistrationRules(tc.mayRegister, tc.secrets)).To(Equal(tc.want))
		})
	}
}

// TestATokenIsUsableUntilItExpiresThenItsIdentityIsDeleted follows one
// short-lived token: its Secret holds agent values whose token
// authenticates as the token's registration identity; once it expires the
// identity, its rights and the Secret are deleted, so the token no longer
// authenticates, and a Remote created through it afterwards is refused.
func TestATokenIsUsableUntilItExpiresThenItsIdentityIsDeleted(t *testing.T) {
	t.Parallel() // waits out the apiserver's token cache
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	tok := issue(t, ns, "brief", fleeetv1.RegistrationTokenSpec{TTL: &metav1.Duration{Duration: 4 * time.Second}, MaxRegistrations: 3})
	id := metav1.ObjectMeta{Namespace: ns, Name: fleeetv1.RegistrationIdentityName("brief")}

	g.Expect(tok.Finalizers).To(ContainElement(fleeetv1.RegistrationTokenFinalizer))
	g.Expect(tok.Status.ExpiresAt.Time).To(BeTemporally("==", tok.CreationTimestamp.Add(4*time.Second)))
	ready := condition(g, tok.Status.Conditions, fleeetv1.ReadyCondition)
	g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(ready.Reason).To(Equal(fleeetv1.ReasonActive))
	g.Expect(ready.Message).To(HavePrefix("0 of 3 registrations used; usable until "))
	secret := &corev1.Secret{ObjectMeta: id}
	get(g, secret)
	var values credential.AgentValues
	g.Expect(yaml.Unmarshal(secret.Data[credential.ValuesKey], &values)).To(Succeed())
	g.Expect(values.Management).To(Equal(credential.Management{URL: cluster.Config.Host, CABundle: cluster.Config.CAData, Namespace: ns}))
	g.Expect(values.Token).To(Equal(string(secret.Data[credential.TokenKey])))
	g.Expect(whoIs(ctx, values.Token)).To(Equal(serviceAccount(ns, id.Name)))
	role := &rbacv1.Role{ObjectMeta: id}
	get(g, role)
	g.Expect(role.Rules).To(Equal(registration.RegistrationRules(true, nil)))

	g.Eventually(func(g Gomega) {
		get(g, tok)
		ready := condition(g, tok.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(ready.Reason).To(Equal(fleeetv1.ReasonExpired))
		g.Expect(ready.Message).To(HaveSuffix("; the registration identity is deleted"))
		g.Expect(tok.Status.SecretName).To(BeEmpty())
		gone(g, &corev1.ServiceAccount{ObjectMeta: id}, &rbacv1.Role{ObjectMeta: id}, &rbacv1.RoleBinding{ObjectMeta: id}, &corev1.Secret{ObjectMeta: id})
		g.Expect(notes(g, ns, "RegistrationToken", "brief", fleeetv1.ReasonRetired)).To(ConsistOf(HavePrefix("Deleted registration identity " + id.Name)))
	}, timeout, poll).Should(Succeed())
	g.Expect(apimeta.IsStatusConditionTrue(tok.Status.Conditions, fleeetv1.StalledCondition)).To(BeFalse(), "expiry is the token's end, not a fault")
	rejected(t, values.Token, "the token dies with its identity")

	late := registrant(t, ns, "brief", "late", nil)
	g.Eventually(func(g Gomega) {
		gone(g, late)
		g.Expect(notes(g, ns, "RegistrationToken", "brief", fleeetv1.ReasonRegistrationRefused)).To(ContainElement(
			HavePrefix("Refused Remote late: created after RegistrationToken brief expired at ")))
	}, timeout, poll).Should(Succeed())
	get(g, tok)
	g.Expect(tok.Status.Registered).To(BeEmpty())
}

// Two Remotes fill the token; a third, which admission would have refused
// had it not raced past, is refused and deleted by the manager, and the
// token keeps its identity, saying it is used up, until it expires.
func TestAUsedUpTokenRefusesAndDeletesSurplusRemotes(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	tok := issue(t, ns, "pair", fleeetv1.RegistrationTokenSpec{MaxRegistrations: 2})
	registrant(t, ns, "pair", "edge-1", nil)
	registrant(t, ns, "pair", "edge-2", nil)
	g.Eventually(func(g Gomega) {
		get(g, tok)
		g.Expect(registeredNames(tok)).To(ConsistOf("edge-1", "edge-2"))
		ready := condition(g, tok.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(ready.Reason).To(Equal(fleeetv1.ReasonUsedUp))
		g.Expect(ready.Message).To(HavePrefix("used up: 2 of 2 registrations; the registration identity stays until "))
	}, timeout, poll).Should(Succeed())
	g.Expect(tok.Status.Registrations).To(BeEquivalentTo(2))
	g.Expect(tok.Status.SecretName).To(Equal(fleeetv1.RegistrationIdentityName("pair")), "a late agent is told why, not refused unexplained")

	surplus := registrant(t, ns, "pair", "edge-3", nil)
	g.Eventually(func(g Gomega) {
		gone(g, surplus)
		g.Expect(notes(g, ns, "RegistrationToken", "pair", fleeetv1.ReasonRegistrationRefused)).To(ContainElement(
			"Refused Remote edge-3: RegistrationToken pair is used up: 2 of 2 registrations; deleting it"))
	}, timeout, poll).Should(Succeed())
	gone(g, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fleeetv1.RemoteIdentityName("edge-3")}})
	get(g, tok)
	g.Expect(registeredNames(tok)).To(ConsistOf("edge-1", "edge-2"), "entries are never removed or replaced")
}

func TestDeletingATokenDeletesItsIdentity(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	tok := issue(t, ns, "doomed", fleeetv1.RegistrationTokenSpec{})
	id := metav1.ObjectMeta{Namespace: ns, Name: fleeetv1.RegistrationIdentityName("doomed")}
	secret := &corev1.Secret{ObjectMeta: id}
	get(g, secret)

	g.Expect(cluster.Client.Delete(t.Context(), tok)).To(Succeed())
	g.Eventually(func(g Gomega) {
		gone(g, tok, &corev1.ServiceAccount{ObjectMeta: id}, &rbacv1.Role{ObjectMeta: id}, &rbacv1.RoleBinding{ObjectMeta: id}, secret)
	}, timeout, poll).Should(Succeed())
	rejected(t, string(secret.Data[credential.TokenKey]), "the token dies with its identity")
}
