package kubeconfig

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

// FlagDenyNetworks names the flag listing the networks the manager never
// connects to for a push-mode Remote.
const FlagDenyNetworks = "push-networks-deny"

// DefaultDeniedNetworks are the networks refused unless an operator says
// otherwise: link-local addresses, where clouds serve instance metadata
// and credentials (169.254.169.254, fd00:ec2::254), and Alibaba Cloud's
// metadata address. Loopback is not among them: the manager's own
// loopback holds nothing a kubeconfig's credentials unlock, and test
// fleets serve clusters there.
var DefaultDeniedNetworks = []string{"169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32"}

// Networks is a list of networks, as a pflag value of comma-separated
// CIDRs.
type Networks []netip.Prefix

// ParseNetworks parses CIDRs (a bare address stands for itself).
func ParseNetworks(cidrs []string) (Networks, error) {
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
	p, err := ParseNetworks(strings.Split(v, ","))
	if err != nil {
		return err
	}
	*n = p
	return nil
}

// Type implements pflag.Value.
func (n *Networks) Type() string { return "cidrs" }

func bindNetworks(fs *pflag.FlagSet, o *Options) {
	fs.Var(&o.DeniedNetworks, FlagDenyNetworks,
		"Networks (comma-separated CIDRs) the manager never connects to for a push-mode Remote, checked on the address each connection dials, after DNS. Unset: "+strings.Join(DefaultDeniedNetworks, ",")+" (link-local and cloud metadata); an empty value denies none.")
}

// NetworkRefusedError says a connection to a push Remote's cluster was
// refused because its address lies in a denied network.
type NetworkRefusedError struct {
	Address netip.Addr
	Network netip.Prefix
}

func (e *NetworkRefusedError) Error() string {
	return fmt.Sprintf("refused to connect to %s: it lies in %s, a network the manager does not connect to (--%s)", e.Address, e.Network, FlagDenyNetworks)
}

// dialer returns a dial function that refuses every address in denied,
// after name resolution, so neither a hostname nor a redirect reaches one.
func dialer(denied Networks) func(ctx context.Context, network, address string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("refused to connect to %s: not an IP address and port", address)
			}
			if p, ok := denied.Contains(ap.Addr()); ok {
				return &NetworkRefusedError{Address: ap.Addr().Unmap(), Network: p}
			}
			return nil
		}}
	return d.DialContext
}
