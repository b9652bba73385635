package kubeconfig

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A push Remote's cluster in a denied network is never dialled, whether
// the kubeconfig names its address or a host name resolving to it.
func TestConnectionsToDeniedNetworksAreRefusedAfterResolution(t *testing.T) {
	g := NewWithT(t)
	served := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { served++ }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	get := func(host string, o Options) error {
		cfg, err := Load(write(t, func(cfg *clientcmdapi.Config) {
			cfg.Clusters["a"] = &clientcmdapi.Cluster{Server: "http://" + net.JoinHostPort(host, port)}
		}), o)
		g.Expect(err).NotTo(HaveOccurred())
		hc, err := rest.HTTPClientFor(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		resp, err := hc.Get(cfg.Host + "/version")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	loopback, err := ParseNetworks([]string{"127.0.0.0/8", "::1"})
	g.Expect(err).NotTo(HaveOccurred())
	for _, host := range []string{"127.0.0.1", "localhost"} {
		err := get(host, Options{DeniedNetworks: loopback})
		var refused *NetworkRefusedError
		g.Expect(errors.As(err, &refused)).To(BeTrue(), "dialling %s: %v", host, err)
		g.Expect(err.Error()).To(ContainSubstring("it lies in 127.0.0.0/8"))
	}
	g.Expect(served).To(BeZero())
	// The defaults deny link-local and metadata addresses, not loopback.
	g.Expect(get("127.0.0.1", Options{})).To(Succeed())
	g.Expect(served).To(Equal(1))
}

func TestDefaultsDenyLinkLocalAndMetadataAddresses(t *testing.T) {
	g := NewWithT(t)
	n, err := ParseNetworks(DefaultDeniedNetworks)
	g.Expect(err).NotTo(HaveOccurred())
	for _, a := range []string{"169.254.169.254", "fe80::1", "fd00:ec2::254", "100.100.100.200", "::ffff:169.254.169.254"} {
		_, ok := n.Contains(mustAddr(a))
		g.Expect(ok).To(BeTrue(), a)
	}
	for _, a := range []string{"10.0.0.1", "127.0.0.1", "::1", "8.8.8.8"} {
		_, ok := n.Contains(mustAddr(a))
		g.Expect(ok).To(BeFalse(), a)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
