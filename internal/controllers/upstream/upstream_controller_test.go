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

// TestUpstreamWithoutServiceAccountIsRefusedBeforeRegistering: an Upstream
// naming no ServiceAccount would have Flux apply its tenant's syncs as
// itself. The agent refuses it before spending its registration token,
// unless started with the documented opt-out.
func TestUpstreamWithoutServiceAccountIsRefusedBeforeRegistering(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c := testenv.StartCluster(t, "downstream")
	ns := c.Namespace(t, "agent", nil)
	g.Expect(c.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-a-token"},
		Data:       map[string][]byte{credential.TokenKey: []byte("registration-token")},
	})).To(Succeed())
	up := &fleeetv1.Upstream{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-a"},
		Spec: fleeetv1.UpstreamSpec{
			// Nothing listens there: an attempt to register fails.
			Management:     fleeetv1.ManagementEndpoint{URL: "https://" + testenv.FreeAddr(t), Namespace: "team-a"},
			TokenSecretRef: &fleeetv1.LocalObjectReference{Name: "team-a-token"},
			ClusterName:    "edge-1",
		},
	}
	g.Expect(c.Client.Create(ctx, up)).To(Succeed())
	start := func(o agent.Options) func(bool) {
		stop, err := testenv.StartManager(c, "fleet-agent", func(ctx context.Context, mgr ctrl.Manager) error {
			return agent.Setup(ctx, mgr, o)
		})
		g.Expect(err).NotTo(HaveOccurred())
		return stop
	}

	stop := start(agent.Options{Concurrent: 1})
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
	stop = start(agent.Options{Concurrent: 1, AllowUnconfined: true})
	t.Cleanup(func() { stop(t.Failed()) })
	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(up), up)).To(Succeed())
		registered := apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.RegisteredCondition)
		g.Expect(registered).NotTo(BeNil(), "%+v", up.Status)
		g.Expect(registered.Reason).To(Equal(fleeetv1.ReasonRegistrationFailed))
		g.Expect(apimeta.IsStatusConditionTrue(up.Status.Conditions, fleeetv1.StalledCondition)).To(BeFalse())
	}, timeout, poll).Should(Succeed())
}

// TestAnUpstreamTrustingAnotherCASaysWhichCertificateFailed: a token whose
// enrolment string carried another management cluster's CA (or whose
// cluster changed its CA) fails registration saying so and what to do,
// within seconds, not as a bare TLS error, and never repeating the token.
func TestAnUpstreamTrustingAnotherCASaysWhichCertificateFailed(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c := testenv.StartCluster(t, "downstream")
	ns := c.Namespace(t, "agent", nil)
	const token = "registration-token-value"
	g.Expect(c.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-a-token"},
		Data:       map[string][]byte{credential.TokenKey: []byte(token)},
	})).To(Succeed())
	_, foreignCA := testenv.ServingCertificate(t)
	up := &fleeetv1.Upstream{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-a"},
		Spec: fleeetv1.UpstreamSpec{
			// A real API server, whose certificate the trusted CA did not sign.
			Management:         fleeetv1.ManagementEndpoint{URL: c.Config.Host, CABundle: foreignCA, Namespace: "team-a"},
			TokenSecretRef:     &fleeetv1.LocalObjectReference{Name: "team-a-token"},
			ClusterName:        "edge-1",
			ServiceAccountName: "team-a",
		},
	}
	g.Expect(c.Client.Create(ctx, up)).To(Succeed())
	stop, err := testenv.StartManager(c, "fleet-agent", func(ctx context.Context, mgr ctrl.Manager) error {
		return agent.Setup(ctx, mgr, agent.Options{Concurrent: 1})
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { stop(t.Failed()) })

	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(up), up)).To(Succeed())
		registered := apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.RegisteredCondition)
		g.Expect(registered).NotTo(BeNil(), "%+v", up.Status)
		g.Expect(registered.Reason).To(Equal(fleeetv1.ReasonRegistrationFailed))
		g.Expect(registered.Message).To(ContainSubstring("the management API's serving certificate is not signed by the CA in spec.management.caBundle"))
		g.Expect(registered.Message).To(ContainSubstring("create a new token"))
		g.Expect(registered.Message).NotTo(ContainSubstring(token))
	}, timeout, poll).Should(Succeed())
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "team-a-token"}, &corev1.Secret{})).To(Succeed(), "the token is kept for a retry")
}
