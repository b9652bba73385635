package testenv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// A node's network: its own network namespace, so that its bridge, its
// kube-proxy's iptables rules and its ports (kubelet's 10250, …) neither
// clash with other nodes, other test processes or the host, nor outlive it:
// deleting the namespace deletes them all.
//
//	host ── fleeet<i> (100.64.x.y/30) ═veth═ eth0 (…y+1) ── node netns fleeet-<i>
//	                                                          └─ cni0 bridge 10.(128+i/256).(i%256).1/24 ── Pods
//
// The host routes the node's Pod subnet via the node's eth0, so the
// apiserver (on the host) reaches Pods; the node's default route ends on
// the host, so Pods reach the apiserver at any host address. Nothing is
// masqueraded: every address is routable both ways.
const (
	// maxNodeIndex bounds the nodes one host runs at once (across test
	// processes): pod subnets are carved from 10.128.0.0/12, links from
	// 100.64.0.0/16.
	maxNodeIndex = 4095
	// clusterPodCIDR covers every node's Pod subnet: kube-proxy treats
	// traffic from it as cluster-internal.
	clusterPodCIDR = "10.128.0.0/12"
	// kubeletPort and friends are the components' usual ports; every node
	// has its own network namespace, so they never clash.
	kubeletPort, kubeletHealthzPort, kubeProxyHealthzPort, kubeProxyMetricsPort = 10250, 10248, 10256, 10249
)

// nodeNetwork is where one node sits on the host's network.
type nodeNetwork struct {
	// index numbers the node among the nodes on this host.
	index int
	// hostIP and nodeIP are the ends of the link between host and node;
	// nodeIP is the node's InternalIP.
	hostIP, nodeIP string
	// podCIDR is the subnet of the node's Pods.
	podCIDR *net.IPNet
}

func (n *nodeNetwork) netns() string     { return nodeNetns(n.index) }
func (n *nodeNetwork) netnsPath() string { return filepath.Join("/run/netns", n.netns()) }
func nodeNetns(index int) string         { return fmt.Sprintf("fleeet-%d", index) }
func nodeLink(index int) string          { return fmt.Sprintf("fleeet%d", index) }

// isNodeLink reports whether a host interface is the host end of a node's
// link, which is no address for Pods to reach the host at.
func isNodeLink(name string) bool {
	var i int
	_, err := fmt.Sscanf(name, "fleeet%d", &i)
	return err == nil && nodeLink(i) == name
}

func networkFor(index int) *nodeNetwork {
	link := make(net.IP, 4)
	binary.BigEndian.PutUint32(link, binary.BigEndian.Uint32(net.IPv4(100, 64, 0, 0).To4())+uint32(index)*4)
	host, node := make(net.IP, 4), make(net.IP, 4)
	copy(host, link)
	copy(node, link)
	host[3]++
	node[3] += 2
	return &nodeNetwork{
		index:   index,
		hostIP:  host.String(),
		nodeIP:  node.String(),
		podCIDR: &net.IPNet{IP: net.IPv4(10, byte(128+index/256), byte(index%256), 0).To4(), Mask: net.CIDRMask(24, 32)},
	}
}

// gateway is the node's address on its Pods' bridge.
func (n *nodeNetwork) gateway() string {
	gw := make(net.IP, 4)
	copy(gw, n.podCIDR.IP)
	gw[3] = 1
	return gw.String()
}

// createNodeNetwork claims a free node index, creating its network
// namespace (which fails if another process claimed the index first), tells
// claimed, and wires the namespace to the host.
func createNodeNetwork(claimed func(index int) error) (*nodeNetwork, error) {
	routes := hostRoutes()
	for range 64 {
		n := networkFor(1 + rand.IntN(maxNodeIndex))
		if overlapsAny(n, routes) {
			continue
		}
		if _, err := runIn("", "ip", "netns", "add", n.netns()); err != nil {
			if strings.Contains(err.Error(), "exists") {
				continue
			}
			return nil, err
		}
		if err := claimed(n.index); err != nil {
			return nil, errors.Join(err, deleteNodeNetwork(n.index))
		}
		if err := n.wire(); err != nil {
			return nil, errors.Join(err, deleteNodeNetwork(n.index))
		}
		return n, nil
	}
	return nil, fmt.Errorf("found no free node index on this host")
}

// wire links the node's namespace to the host and routes its Pod subnet.
func (n *nodeNetwork) wire() error {
	ns, link := n.netns(), nodeLink(n.index)
	steps := [][]string{
		{"ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "addr", "add", n.hostIP + "/30", "dev", link},
		{"ip", "link", "set", link, "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", n.nodeIP + "/30", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", "default", "via", n.hostIP},
		{"ip", "route", "add", n.podCIDR.String(), "via", n.nodeIP, "dev", link},
		// The node routes between its Pods and the host. Both settings
		// belong to the node's namespace, not the host's.
		{"nsenter", "--net=" + n.netnsPath(), "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if _, err := runIn("", s[0], s[1:]...); err != nil {
			return err
		}
	}
	// Bridged traffic between two Pods of the node passes iptables only
	// with this, which a Service whose endpoint is on the caller's own node
	// needs; without br_netfilter the rest still works.
	_, _ = runIn("", "nsenter", "--net="+n.netnsPath(), "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
	return nil
}

// deleteNodeNetwork removes a node's link, route and namespace; with the
// namespace go the node's bridge, Pod interfaces and iptables rules.
func deleteNodeNetwork(index int) error {
	var errs []error
	if _, err := os.Stat(filepath.Join("/sys/class/net", nodeLink(index))); err == nil {
		if _, err := runIn("", "ip", "link", "del", nodeLink(index)); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", nodeNetns(index))); err == nil {
		if _, err := runIn("", "ip", "netns", "delete", nodeNetns(index)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hostRoutes lists the host's IPv4 routes other than the default route.
func hostRoutes() []*net.IPNet {
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return nil
	}
	var routes []*net.IPNet
	for _, line := range strings.Split(string(data), "\n")[1:] {
		var iface string
		var dest, gw, flags, refcnt, use, metric, mask uint32
		if _, err := fmt.Sscanf(line, "%s %x %x %x %d %d %d %x", &iface, &dest, &gw, &flags, &refcnt, &use, &metric, &mask); err != nil || mask == 0 {
			continue
		}
		ip, m := make(net.IP, 4), make(net.IPMask, 4)
		binary.LittleEndian.PutUint32(ip, dest)
		binary.LittleEndian.PutUint32(m, mask)
		routes = append(routes, &net.IPNet{IP: ip, Mask: m})
	}
	return routes
}

// overlapsAny reports whether the node's subnets overlap a host route: the
// host would then route one of them elsewhere.
func overlapsAny(n *nodeNetwork, routes []*net.IPNet) bool {
	link := &net.IPNet{IP: net.ParseIP(n.hostIP).Mask(net.CIDRMask(30, 32)), Mask: net.CIDRMask(30, 32)}
	for _, r := range routes {
		for _, s := range []*net.IPNet{n.podCIDR, link} {
			if r.Contains(s.IP) || s.Contains(r.IP) {
				return true
			}
		}
	}
	return false
}

// cniConfig is the node's CNI network: a bridge whose address is the Pods'
// gateway, host-local addresses from the node's subnet (its allocations
// kept in the node's directory), and portmap for hostPort.
func (n *nodeNetwork) cniConfig(name, ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, name, n.podCIDR.String(), n.gateway(), ipamDir)
}

// enableHostForwarding turns on IPv4 forwarding on the host, if it is off,
// and reports whether it did: traffic between Pods of different nodes
// passes through the host. It stays on, as a container runtime leaves it.
func enableHostForwarding() (bool, error) {
	const path = "/proc/sys/net/ipv4/ip_forward"
	data, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(data)) == "1" {
		return false, err
	}
	return true, os.WriteFile(path, []byte("1"), 0o644)
}
