package module_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// A Module whose sync delivers a Secret its owner has not offered says so,
// naming the Secret and never its data, and stops saying so as soon as the
// Secret is labelled deliverable.
func TestAModuleSaysWhichOfItsSecretsCannotBeDelivered(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	fleettest.NewRemote(t, cluster.Client, ns, "edge-1", nil, true)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git-creds"},
		Data: map[string][]byte{"password": []byte("module-test-value")}}
	g.Expect(cluster.Client.Create(ctx, creds)).To(Succeed())
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
	m.Namespace = ns
	m.Spec.Sync.Secrets = []fleeetv1.SecretDelivery{{Name: "git-creds"}, {Name: "missing"}}
	g.Expect(cluster.Client.Create(ctx, m)).To(Succeed())

	ready := func(g Gomega) *metav1.Condition {
		g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		c := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		return c
	}
	g.Eventually(func(g Gomega) {
		c := ready(g)
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonSecretNotDeliverable))
		g.Expect(c.Message).To(ContainSubstring("Secret git-creds is not labelled fleeet.dev/deliverable=true"))
		g.Expect(c.Message).To(ContainSubstring("Secret missing does not exist"))
	}, timeout, poll).Should(Succeed())

	creds.Labels = map[string]string{fleeetv1.DeliverableLabel: "true"}
	g.Expect(cluster.Client.Update(ctx, creds)).To(Succeed())
	g.Eventually(func(g Gomega) string { return ready(g).Message }, timeout, poll).ShouldNot(ContainSubstring("git-creds"))
	g.Expect(ready(g).Message).To(ContainSubstring("Secret missing does not exist"))
	g.Expect(ready(g).Message).NotTo(ContainSubstring("module-test-value"))
}
