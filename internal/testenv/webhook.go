package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// servingCertificateLifetime outlasts the longest run that serves with
// one: make soak runs for hours.
const servingCertificateLifetime = 24 * time.Hour

// ServingCertificate writes a self-signed certificate for hosts (IP
// addresses or DNS names; 127.0.0.1 when none) as tls.crt and tls.key into
// a new directory, standing in for the one cert-manager would issue, and
// returns the directory and the PEM.
func ServingCertificate(t TB, hosts ...string) (dir string, certPEM []byte) {
	t.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	var ips []net.IP
	var names []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			names = append(names, h)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fleet-manager-webhook"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(servingCertificateLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           ips,
		DNSNames:              names,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	for name, data := range map[string][]byte{
		"tls.crt": certPEM,
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, certPEM
}

// RouteWebhook points every webhook of the ValidatingWebhookConfiguration
// name at to and returns the previous clientConfig. Without a kubelet,
// Service or cainjector, this is how a chart's webhook reaches a manager
// process on loopback.
func RouteWebhook(t TB, c *Cluster, name string, to admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.WebhookClientConfig {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Client.Get(t.Context(), client.ObjectKey{Name: name}, vwc); err != nil {
		t.Fatal(err)
	}
	if len(vwc.Webhooks) == 0 {
		t.Fatalf("ValidatingWebhookConfiguration %s has no webhooks", name)
	}
	was := vwc.Webhooks[0].ClientConfig
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig = to
	}
	if err := c.Client.Update(t.Context(), vwc); err != nil {
		t.Fatal(err)
	}
	return was
}
