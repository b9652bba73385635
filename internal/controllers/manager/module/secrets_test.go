package module_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

	g.Eventually(func(g Gomega) {
		c := readyOf(g, m)
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonSecretNotDeliverable))
		g.Expect(c.Message).To(ContainSubstring("Secret git-creds is not labelled fleeet.dev/deliverable=true"))
		g.Expect(c.Message).To(ContainSubstring("Secret missing does not exist"))
	}, timeout, poll).Should(Succeed())

	creds.Labels = map[string]string{fleeetv1.DeliverableLabel: "true"}
	g.Expect(cluster.Client.Update(ctx, creds)).To(Succeed())
	g.Eventually(func(g Gomega) string { return readyOf(g, m).Message }, timeout, poll).ShouldNot(ContainSubstring("git-creds"))
	g.Expect(readyOf(g, m).Message).To(ContainSubstring("Secret missing does not exist"))
	g.Expect(readyOf(g, m).Message).NotTo(ContainSubstring("module-test-value"))
}
