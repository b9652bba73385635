package upstream_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	timeout = time.Minute
	poll    = 200 * time.Millisecond
)

// registrationToken is the bearer token the tests' Upstreams register with;
// no status or message may repeat it.
const registrationToken = "registration-token-value"

// upstreamTo creates, in a namespace of its own in c, a registration token
// Secret and an Upstream registering with it at mgmt as edge-1, its tenant's
// syncs applied as serviceAccount.
func upstreamTo(t *testing.T, c *testenv.Cluster, mgmt fleeetv1.ManagementEndpoint, serviceAccount string) *fleeetv1.Upstream {
	t.Helper()
	g := NewWithT(t)
	ns := c.Namespace(t, "agent", nil)
	g.Expect(c.Client.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-a-token"},
		Data:       map[string][]byte{credential.TokenKey: []byte(registrationToken)},
	})).To(Succeed())
	up := &fleeetv1.Upstream{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-a"},
		Spec: fleeetv1.UpstreamSpec{
			Management:         mgmt,
			TokenSecretRef:     &fleeetv1.LocalObjectReference{Name: "team-a-token"},
			ClusterName:        "edge-1",
			ServiceAccountName: serviceAccount,
		},
	}
	g.Expect(c.Client.Create(t.Context(), up)).To(Succeed())
	return up
}

// startAgent runs the agent against c until stopped, reading only in ns.
func startAgent(t *testing.T, c *testenv.Cluster, ns string, o agent.Options) func(bool) {
	t.Helper()
	stop, err := testenv.StartManager(c, "fleet-agent", func(ctx context.Context, mgr ctrl.Manager) error {
		return agent.Setup(ctx, mgr, o)
	}, confinedTo(ns, ns))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return stop
}

// registrationFailed waits until the Upstream says its registration failed,
// to be retried, and returns that condition.
func registrationFailed(g Gomega, c *testenv.Cluster, up *fleeetv1.Upstream) *metav1.Condition {
	var registered *metav1.Condition
	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(context.Background(), client.ObjectKeyFromObject(up), up)).To(Succeed())
		registered = apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.RegisteredCondition)
		g.Expect(registered).NotTo(BeNil(), "%+v", up.Status)
		g.Expect(registered.Reason).To(Equal(fleeetv1.ReasonRegistrationFailed))
		g.Expect(apimeta.IsStatusConditionTrue(up.Status.Conditions, fleeetv1.StalledCondition)).To(BeFalse())
	}, timeout, poll).Should(Succeed())
	return registered
}

// TestUpstreamWithoutServiceAccountIsRefusedBeforeRegistering: an Upstream
// naming no ServiceAccount would have Flux apply its tenant's syncs as
// itself. The agent refuses it before spending its registration token,
// unless started with the documented opt-out.
func TestUpstreamWithoutServiceAccountIsRefusedBeforeRegistering(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c := down
	// Nothing listens there: an attempt to register fails.
	up := upstreamTo(t, c, fleeetv1.ManagementEndpoint{URL: "https://" + testenv.FreeAddr(t), Namespace: "team-a"}, "")
	ns := up.Namespace

	stop := startAgent(t, c, ns, agent.Options{Concurrent: 1})
	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(up), up)).To(Succeed())
		g.Expect(up.Status.ObservedGeneration).To(Equal(up.Generation))
		stalled := apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.StalledCondition)
		g.Expect(stalled).NotTo(BeNil(), "%+v", up.Status)
		g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue), "%+v", stalled)
		g.Expect(stalled.Reason).To(Equal(fleeetv1.ReasonServiceAccountNameUnset))
		g.Expect(stalled.Message).To(HavePrefix("spec.serviceAccountName: "))
		ready := apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(fleeetv1.ReasonServiceAccountNameUnset))
	}, timeout, poll).Should(Succeed())
	g.Expect(apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.RegisteredCondition)).To(BeNil(), "no attempt to register")
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "team-a-token"}, &corev1.Secret{})).To(Succeed(), "the token is kept")
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "team-a"}, &fleeetv1.Assemblage{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no Assemblage is written: %v", err)
	stop(t.Failed())

	// With the opt-out the agent tries to register, and fails only because
	// nothing answers.
	stop = startAgent(t, c, ns, agent.Options{Concurrent: 1, AllowUnconfined: true})
	t.Cleanup(func() { stop(t.Failed()) })
	registrationFailed(g, c, up)
}

// TestAnUpstreamTrustingAnotherCASaysWhichCertificateFailed: a token whose
// enrolment string carried another management cluster's CA (or whose
// cluster changed its CA) fails registration saying so and what to do,
// within seconds, not as a bare TLS error, and never repeating the token.
func TestAnUpstreamTrustingAnotherCASaysWhichCertificateFailed(t *testing.T) {
	g := NewWithT(t)
	c := down
	_, foreignCA := testenv.ServingCertificate(t)
	// A real API server, whose certificate the trusted CA did not sign.
	up := upstreamTo(t, c, fleeetv1.ManagementEndpoint{URL: c.Config.Host, CABundle: foreignCA, Namespace: "team-a"}, "team-a")
	stop := startAgent(t, c, up.Namespace, agent.Options{Concurrent: 1})
	t.Cleanup(func() { stop(t.Failed()) })

	registered := registrationFailed(g, c, up)
	g.Expect(registered.Message).To(ContainSubstring("the management API's serving certificate is not signed by the CA in spec.management.caBundle"))
	g.Expect(registered.Message).To(ContainSubstring("create a new token"))
	g.Expect(registered.Message).NotTo(ContainSubstring(registrationToken))
	g.Expect(c.Client.Get(t.Context(), client.ObjectKey{Namespace: up.Namespace, Name: "team-a-token"}, &corev1.Secret{})).To(Succeed(), "the token is kept for a retry")
}

// TestARefusedUpstreamTriesAgainOnceItsTokenSecretChanges: the agent reads
// the Secrets of its own namespace by name and watches none of them, so an
// Upstream refused for its token Secret looks at that Secret again
// (refusalRecheck) and tries to register once it changed.
func TestARefusedUpstreamTriesAgainOnceItsTokenSecretChanges(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c := down
	// Nothing listens there: an attempt to register fails.
	up := upstreamTo(t, c, fleeetv1.ManagementEndpoint{URL: "https://" + testenv.FreeAddr(t), Namespace: "team-a"}, "team-a")
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: up.Namespace, Name: "team-a-token"}}
	g.Expect(c.Client.Delete(ctx, token)).To(Succeed())

	stop := startAgent(t, c, up.Namespace, agent.Options{Concurrent: 1})
	t.Cleanup(func() { stop(t.Failed()) })
	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(up), up)).To(Succeed())
		registered := apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.RegisteredCondition)
		g.Expect(registered).NotTo(BeNil(), "%+v", up.Status)
		g.Expect(registered.Reason).To(Equal(fleeetv1.ReasonRegistrationRefused))
		g.Expect(registered.Message).To(Equal("spec.tokenSecretRef: Secret team-a-token not found, and this cluster holds no credential"))
		g.Expect(apimeta.IsStatusConditionTrue(up.Status.Conditions, fleeetv1.StalledCondition)).To(BeTrue())
	}, timeout, poll).Should(Succeed())

	// The admin puts the token back; the agent tries it, and fails only
	// because nothing answers.
	g.Expect(c.Client.Create(ctx, &corev1.Secret{ObjectMeta: token.ObjectMeta,
		Data: map[string][]byte{credential.TokenKey: []byte(registrationToken)}})).To(Succeed())
	registrationFailed(g, c, up)
}

// TestARegistrationRefusedByRBACIsAskedAgain: while a registration token
// that expired or was revoked is taken apart upstream, its identity may
// still authenticate but no longer hold its Role, and the registration is
// refused by RBAC, in words that say nothing of expiry. Unlike an answer
// only a change downstream can alter, that one is asked again, so the
// Upstream ends up saying the token expired or was revoked.
func TestARegistrationRefusedByRBACIsAskedAgain(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	// A registration identity whose Role is already gone.
	ns := mgmt.Namespace(t, "team", nil)
	identity := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fleeetv1.RegistrationIdentityName("spent")}}
	g.Expect(mgmt.Client.Create(ctx, identity)).To(Succeed())
	up := upstreamTo(t, down, fleeetv1.ManagementEndpoint{URL: mgmt.Config.Host, CABundle: mgmt.Config.CAData, Namespace: ns}, "team-a")
	token := &corev1.Secret{}
	g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: up.Namespace, Name: "team-a-token"}, token)).To(Succeed())
	token.Data[credential.TokenKey] = []byte(testenv.ServiceAccountToken(t, mgmt, ns, identity.Name))
	g.Expect(down.Client.Update(ctx, token)).To(Succeed())

	stop := startAgent(t, down, up.Namespace, agent.Options{Concurrent: 1})
	t.Cleanup(func() { stop(t.Failed()) })
	refused := func(g Gomega) *metav1.Condition {
		g.Expect(down.Client.Get(ctx, client.ObjectKeyFromObject(up), up)).To(Succeed())
		registered := apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.RegisteredCondition)
		g.Expect(registered).NotTo(BeNil(), "%+v", up.Status)
		g.Expect(registered.Reason).To(Equal(fleeetv1.ReasonRegistrationRefused))
		return registered
	}
	g.Eventually(func(g Gomega) string { return refused(g).Message }, timeout, poll).Should(ContainSubstring("cannot create resource"))

	// The identity goes too, as the token controller finishes: the next
	// ask is answered 401, and the Upstream says what happened.
	g.Expect(mgmt.Client.Delete(ctx, identity)).To(Succeed())
	g.Eventually(func(g Gomega) string { return refused(g).Message }, timeout, poll).Should(Equal(
		"the management cluster rejected the registration token (HTTP 401): it has expired or been revoked; create a new RegistrationToken"))
}
