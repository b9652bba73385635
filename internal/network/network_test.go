package network

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

func TestDefaultsDenyLinkLocalAndMetadataAddresses(t *testing.T) {
	g := NewWithT(t)
	p := Policy{Flag: "push-networks"}
	for _, a := range []string{"169.254.169.254", "fe80::1", "fe80::1%eth0", "fd00:ec2::254", "100.100.100.200", "::ffff:169.254.169.254"} {
		g.Expect(p.Check(netip.MustParseAddr(a))).To(MatchError(ContainSubstring("a denied network (--push-networks-deny)")), a)
	}
	for _, a := range []string{"10.0.0.1", "127.0.0.1", "::1", "8.8.8.8"} {
		g.Expect(p.Check(netip.MustParseAddr(a))).To(Succeed(), a)
	}
	g.Expect(Policy{Denied: Networks{}}.Check(netip.MustParseAddr("169.254.169.254"))).To(Succeed(), "an empty list denies none")
}

func TestAnAllowListAdmitsOnlyItsNetworksAndTheDenyListStillApplies(t *testing.T) {
	g := NewWithT(t)
	allowed, err := Parse([]string{"10.0.0.0/8", "169.254.0.0/16"})
	g.Expect(err).NotTo(HaveOccurred())
	p := Policy{Allowed: allowed, Flag: "push-networks"}
	g.Expect(p.Check(netip.MustParseAddr("10.1.2.3"))).To(Succeed())
	g.Expect(p.Check(netip.MustParseAddr("192.168.0.1"))).To(MatchError("192.168.0.1 lies outside the allowed networks 10.0.0.0/8,169.254.0.0/16 (--push-networks-allow)"))
	g.Expect(p.Check(netip.MustParseAddr("169.254.169.254"))).To(MatchError(ContainSubstring("169.254.0.0/16, a denied network")))
}

func TestParseNamesWhatIsNotANetwork(t *testing.T) {
	g := NewWithT(t)
	n, err := Parse([]string{" 10.0.0.1 ", "fd00::/8", ""})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.String()).To(Equal("10.0.0.1/32,fd00::/8"))
	_, err = Parse([]string{"10.0.0.0/33"})
	g.Expect(err).To(MatchError(HavePrefix(`"10.0.0.0/33" is not a CIDR`)))
	_, err = Parse([]string{"metadata"})
	g.Expect(err).To(MatchError(`"metadata" is not a CIDR or an IP address`))
}

// A source URL is fetched in another cluster, so only what its text says
// can be judged: addresses, numbers resolvers read as addresses, and the
// names of metadata services.
func TestSourceHostsInDeniedNetworksAreRefused(t *testing.T) {
	p := Policy{Flag: "source-networks"}
	for _, tc := range []struct {
		url, host, refused string
	}{
		{"https://github.com/org/repo.git", "github.com", ""},
		{"git@github.com:org/repo.git", "github.com", ""},
		{"ssh://git@10.0.0.5:2222/repo.git", "10.0.0.5", ""},
		{"oci://ghcr.io/org/charts", "ghcr.io", ""},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254", "169.254.169.254 lies in 169.254.0.0/16, a denied network (--source-networks-deny)"},
		{"https://user@169.254.169.254:8443/x", "169.254.169.254", "169.254.169.254 lies in 169.254.0.0/16"},
		{"git@169.254.169.254:org/repo.git", "169.254.169.254", "169.254.169.254 lies in 169.254.0.0/16"},
		{"https://[fd00:ec2::254]/", "fd00:ec2::254", "fd00:ec2::254 lies in fd00:ec2::254/128"},
		{"https://[::ffff:169.254.169.254]/", "::ffff:169.254.169.254", "169.254.169.254 lies in 169.254.0.0/16"},
		{"https://[fe80::1%25eth0]/", "fe80::1%eth0", "fe80::1 lies in fe80::/10"},
		{"http://2852039166/", "2852039166", "in a form other than dotted decimal"},
		{"http://0xA9FEA9FE/", "0xA9FEA9FE", "in a form other than dotted decimal"},
		{"http://0251.0376.0251.0376/", "0251.0376.0251.0376", "in a form other than dotted decimal"},
		{"http://169.254.43518/", "169.254.43518", "in a form other than dotted decimal"},
		{"http://Metadata.Google.Internal./computeMetadata/v1/", "Metadata.Google.Internal.", "names a cloud metadata service"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			g := NewWithT(t)
			host := URLHost(tc.url)
			g.Expect(host).To(Equal(tc.host))
			err := p.CheckHost(host)
			if tc.refused == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.refused)))
		})
	}
}
