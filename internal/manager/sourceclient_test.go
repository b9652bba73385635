package manager

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/network"
	"github.com/fleeet-dev/fleeet/internal/versions"
)

// A registry a tenant runs cannot send the manager's version look to a
// token service in a network the source network policy denies: the look
// fails, naming the policy, and the token service is never reached.
func TestAVersionLookNeverReachesADeniedTokenService(t *testing.T) {
	g := NewWithT(t)
	var reached atomic.Int32
	tokens := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		fmt.Fprint(w, `{"token":"t"}`)
	}))
	l, err := net.Listen("tcp", "127.0.0.2:0")
	g.Expect(err).NotTo(HaveOccurred())
	tokens.Listener = l
	tokens.Start()
	defer tokens.Close()
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+l.Addr().String()+`/token",service="r"`)
		http.Error(w, "a token is required", http.StatusUnauthorized)
	}))
	defer registry.Close()

	c := sourceClient(network.Policy{Denied: network.Networks{netip.MustParsePrefix("127.0.0.2/32")}, Flag: FlagSourceNetworks})
	src := fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: "oci://" + registry.Listener.Addr().String() + "/app", Tag: "1.0.0", Insecure: true}}
	_, err = versions.List(t.Context(), c, src)
	g.Expect(err).To(MatchError(ContainSubstring("--source-networks-deny")))
	g.Expect(reached.Load()).To(BeZero())

	// The same registry, the policy allowing the token service: the look
	// reaches it, so the refusal above was the policy's.
	_, err = versions.List(t.Context(), sourceClient(network.Policy{Denied: network.Networks{}}), src)
	g.Expect(err).To(HaveOccurred()) // the registry never serves tags
	g.Expect(reached.Load()).To(BeNumerically(">", 0))
}
