package charts_test

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// expectCertManagerServesTheWebhook checks the fleet-manager chart's
// default path, run by a real cert-manager: the Certificate is Ready, its
// Secret holds a certificate for the webhook Service made as the chart
// asked, and cainjector put the CA of that Secret into every webhook of the
// configuration. That the apiserver then calls the webhook through its
// Service is for the caller to show.
func expectCertManagerServesTheWebhook(t *testing.T, mgmt *testenv.Cluster) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	certificate := &unstructured.Unstructured{}
	certificate.SetAPIVersion("cert-manager.io/v1")
	certificate.SetKind("Certificate")
	g.Eventually(func(g Gomega) {
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: "fleet-manager-webhook"}, certificate)).To(Succeed())
		conditions, _, _ := unstructured.NestedSlice(certificate.Object, "status", "conditions")
		g.Expect(conditions).To(ContainElement(And(HaveKeyWithValue("type", "Ready"), HaveKeyWithValue("status", "True"))))
	}, timeout, poll).Should(Succeed(), func() string { return fmt.Sprintf("certificate status: %v", certificate.Object["status"]) })

	secretName, _, _ := unstructured.NestedString(certificate.Object, "spec", "secretName")
	secret := &corev1.Secret{}
	g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: secretName}, secret)).To(Succeed())
	ca := x509.NewCertPool()
	g.Expect(ca.AppendCertsFromPEM(secret.Data["ca.crt"])).To(BeTrue(), "the Secret holds a CA")
	block, _ := pem.Decode(secret.Data["tls.crt"])
	g.Expect(block).NotTo(BeNil(), "the Secret holds a certificate")
	served, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = served.Verify(x509.VerifyOptions{Roots: ca, DNSName: "fleet-manager-webhook." + managerNamespace + ".svc"})
	g.Expect(err).NotTo(HaveOccurred(), "the Secret's CA vouches for the webhook Service's name")
	g.Expect(served.PublicKey).To(BeAssignableToTypeOf(&ecdsa.PublicKey{}), "the key is the ECDSA one the chart asks for")

	g.Eventually(func(g Gomega) {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Name: "fleet-manager"}, vwc)).To(Succeed())
		g.Expect(vwc.Webhooks).NotTo(BeEmpty())
		for _, w := range vwc.Webhooks {
			g.Expect(string(w.ClientConfig.CABundle)).To(Equal(string(secret.Data["ca.crt"])), "webhook %s trusts the issued CA", w.Name)
		}
	}, timeout, poll).Should(Succeed())
}
