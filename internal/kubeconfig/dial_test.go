package kubeconfig

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleeet-dev/fleeet/internal/network"
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
	loopback, err := network.Parse([]string{"127.0.0.0/8", "::1"})
	g.Expect(err).NotTo(HaveOccurred())
	for _, host := range []string{"127.0.0.1", "localhost"} {
		err := get(host, Options{Networks: network.Policy{Denied: loopback, Flag: FlagNetworks}})
		var refused *network.RefusedError
		g.Expect(errors.As(err, &refused)).To(BeTrue(), "dialling %s: %v", host, err)
		g.Expect(err.Error()).To(ContainSubstring("lies in 127.0.0.0/8, a denied network (--push-networks-deny)"))
	}
	g.Expect(served).To(BeZero())
	// The defaults deny link-local and metadata addresses, not loopback.
	g.Expect(get("127.0.0.1", Options{})).To(Succeed())
	g.Expect(served).To(Equal(1))
}
