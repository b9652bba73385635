// Package network holds lists of IP networks an operator allows or denies,
// and the checks that keep the manager's push connections and tenants'
// source URLs out of the denied ones: link-local and cloud metadata
// addresses by default.
package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

// defaultDenied are the networks refused unless an operator says
// otherwise: link-local addresses, where clouds serve instance metadata
// and credentials (169.254.169.254, fd00:ec2::254), and Alibaba Cloud's
// metadata address. Loopback is not among them: the manager's own
// loopback holds nothing a kubeconfig's credentials unlock, and test
// fleets serve clusters there.
var defaultDenied = []string{"169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32"}

// Networks is a list of networks, as a pflag value of comma-separated
// CIDRs.
type Networks []netip.Prefix

// Parse parses CIDRs (a bare address stands for itself).
func Parse(cidrs []string) (Networks, error) {
	out := make(Networks, 0, len(cidrs))
	for _, c := range cidrs {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if !strings.Contains(c, "/") {
			a, err := netip.ParseAddr(c)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR or an IP address", c)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR: %w", c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Contains returns the first network holding a, if any.
func (n Networks) Contains(a netip.Addr) (netip.Prefix, bool) {
	a = a.Unmap()
	for _, p := range n {
		if p.Contains(a) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

func (n *Networks) String() string {
	s := make([]string, 0, len(*n))
	for _, p := range *n {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

// Set implements pflag.Value.
func (n *Networks) Set(v string) error {
	p, err := Parse(strings.Split(v, ","))
	if err != nil {
		return err
	}
	*n = p
	return nil
}

// Type implements pflag.Value.
func (n *Networks) Type() string { return "cidrs" }

// Policy says which networks may be reached.
type Policy struct {
	// Allowed, when not empty, are the only networks that may be reached.
	Allowed Networks
	// Denied are never reached, allowed or not; nil means defaultDenied,
	// and an operator's empty list denies none.
	Denied Networks
	// Flag is the prefix of the flags that set the policy, for messages:
	// push-networks for --push-networks-deny and --push-networks-allow.
	Flag string
}

// BindFlags binds the policy to --<flag>-deny and, with allow, to
// --<flag>-allow; what says what the networks are checked for.
func (p *Policy) BindFlags(fs *pflag.FlagSet, flag, what string, allow bool) {
	p.Flag = flag
	fs.Var(&p.Denied, flag+"-deny", "Networks (comma-separated CIDRs) "+what+" may never lie in. Unset: "+
		strings.Join(defaultDenied, ",")+" (link-local and cloud metadata); an empty value denies none.")
	if allow {
		fs.Var(&p.Allowed, flag+"-allow", "When set, the only networks (comma-separated CIDRs) "+what+" may lie in; --"+flag+"-deny still applies.")
	}
}

// denied returns the denied networks, the defaults when none were set.
func (p Policy) denied() Networks {
	if p.Denied == nil {
		d, _ := Parse(defaultDenied)
		return d
	}
	return p.Denied
}

// Check returns a *RefusedError when a lies in a denied network, or
// outside the allowed ones.
func (p Policy) Check(a netip.Addr) error {
	a = a.Unmap().WithZone("")
	if n, ok := p.denied().Contains(a); ok {
		return &RefusedError{Address: a, Network: n, Flag: p.Flag}
	}
	if _, ok := p.Allowed.Contains(a); len(p.Allowed) > 0 && !ok {
		return &RefusedError{Address: a, Flag: p.Flag, allowed: p.Allowed}
	}
	return nil
}

// RefusedError says an address lies in a denied network, or outside the
// allowed ones.
type RefusedError struct {
	Address netip.Addr
	// Network is the denied network Address lies in; not valid when
	// Address lies outside the allowed networks.
	Network netip.Prefix
	// Flag is the prefix of the flags that set the policy.
	Flag    string
	allowed Networks
}

func (e *RefusedError) Error() string {
	if e.Network.IsValid() {
		return fmt.Sprintf("%s lies in %s, a denied network (--%s-deny)", e.Address, e.Network, e.Flag)
	}
	return fmt.Sprintf("%s lies outside the allowed networks %s (--%s-allow)", e.Address, e.allowed.String(), e.Flag)
}

// Dialer returns a dial function that refuses, after name resolution, every
// address the policy refuses, so neither a host name nor a redirect
// reaches one.
func (p Policy) Dialer() func(ctx context.Context, network, address string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("refused to connect to %s: not an IP address and port", address)
			}
			if err := p.Check(ap.Addr()); err != nil {
				return fmt.Errorf("refused to connect: %w", err)
			}
			return nil
		}}
	return d.DialContext
}

// metadataHosts are names of cloud metadata services that resolve to a
// link-local address inside the cloud.
var metadataHosts = map[string]bool{"metadata.google.internal": true, "metadata.goog": true, "metadata": true, "instance-data": true, "instance-data.ec2.internal": true}

// numericHost matches a host that resolvers may read as an IPv4 address
// although it is not dotted decimal: 2852039166, 0xa9fea9fe,
// 0251.0376.0251.0376, 169.254.43518.
var numericHost = regexp.MustCompile(`(?i)^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}\.?$`)

// CheckHost judges the host of a URL that is fetched elsewhere (a source,
// fetched by Flux in a downstream cluster), where names resolve out of
// sight: an IP address is checked against the policy; a number that is
// not a dotted-decimal address, and a cloud metadata service's name, are
// refused; any other name passes.
func (p Policy) CheckHost(host string) error {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return p.Check(a)
	}
	if numericHost.MatchString(host) {
		return fmt.Errorf("host %q is an IP address in a form other than dotted decimal, which resolvers read differently; write the address as a.b.c.d", host)
	}
	if metadataHosts[host] {
		return fmt.Errorf("host %q names a cloud metadata service (--%s-deny)", host, p.Flag)
	}
	return nil
}

// scpLike matches a git address of the form user@host:path.
var scpLike = regexp.MustCompile(`^[A-Za-z0-9._-]+@([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):`)

// URLHost returns the host a source URL names, of scheme://[user@]host[:port]/…
// or of user@host:path; empty when it names none.
func URLHost(raw string) string {
	if m := scpLike.FindStringSubmatch(raw); m != nil && !strings.Contains(raw, "://") {
		return m[1]
	}
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
