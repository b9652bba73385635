package recovery

import (
	"cmp"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/fleeet-dev/fleeet/internal/ratelimit"
)

// The recovery endpoint answers anyone who reaches it, so everything a
// client can make it hold or do is bounded, and bounded per client
// wherever one shared bound would let a client use up everyone's: a
// request rate per client address, a rate of requests signed with each
// Remote's key, and connections in all and per address, each held only
// for short timeouts.

// limits bound what clients can make the recovery endpoint hold and do.
// Options carries them so that tests can shorten them; a zero field takes
// defaultLimits' value.
type limits struct {
	// readTimeout bounds reading one request, headers and body, so that a
	// stalled body frees its connection; writeTimeout bounds answering it,
	// and idleTimeout a kept-alive connection waiting for another.
	readTimeout, writeTimeout, idleTimeout time.Duration
	// connections bounds the connections open at once (more wait to be
	// accepted); connectionsPerAddress bounds those of one client address
	// (more are closed at once), so that one address cannot hold them all.
	connections, connectionsPerAddress int
	// perAddress is each client address's allowance of requests;
	// perRemote is each Remote's allowance of requests signed with its key.
	perAddress, perRemote allowance
	// answerGrace is how long after a rotation the request that made it is
	// answered once more, in case its answer was lost (see rotation).
	answerGrace time.Duration
}

// allowance is a token bucket: a rate and a burst.
type allowance struct {
	rate  rate.Limit
	burst int
}

// defaultLimits are the endpoint's bounds.
//
// A whole fleet behind one NAT address recovers together after a
// management rebuild: an address may send 20 requests a second with a
// burst of 100, so 1000 clusters behind one address recover within 45 s of
// the endpoint knowing their Remotes (100 at once, then 20 a second); as
// each one refused with 429 asks again 5 s later, within about a minute.
// Forged requests cost the apiserver nothing (they are screened against
// the manager's cache), so the address allowance mostly bounds the log.
//
// A Remote's agent needs one request, and perhaps the one answered again
// after a lost answer; its burst of 3 bounds the credentials minted while
// racing copies of a request signed with its key are in flight. Only
// requests its key signed are charged to it, so forged requests naming it
// never use up its allowance.
var defaultLimits = limits{
	readTimeout: 10 * time.Second, writeTimeout: 30 * time.Second, idleTimeout: 5 * time.Second,
	connections: 1024, connectionsPerAddress: 128,
	perAddress:  allowance{rate: 20, burst: 100},
	perRemote:   allowance{rate: rate.Every(10 * time.Second), burst: 3},
	answerGrace: 2 * time.Minute,
}

// orDefaults is l with each zero field set to defaultLimits'.
func (l limits) orDefaults() limits {
	d := defaultLimits
	return limits{
		readTimeout: cmp.Or(l.readTimeout, d.readTimeout), writeTimeout: cmp.Or(l.writeTimeout, d.writeTimeout),
		idleTimeout: cmp.Or(l.idleTimeout, d.idleTimeout),
		connections: cmp.Or(l.connections, d.connections), connectionsPerAddress: cmp.Or(l.connectionsPerAddress, d.connectionsPerAddress),
		perAddress: cmp.Or(l.perAddress, d.perAddress), perRemote: cmp.Or(l.perRemote, d.perRemote),
		answerGrace: cmp.Or(l.answerGrace, d.answerGrace),
	}
}

// maxBuckets bounds the token buckets kept for each kind of key; beyond
// it the least recently seen key's is forgotten, so a flood from that many
// keys gains fresh allowances, never the refusal of anyone else.
const maxBuckets = 4096

// newBuckets keeps a bucket of allowance a for each key.
func newBuckets(a allowance) *ratelimit.PerKey {
	return ratelimit.NewPerKey(a.rate, a.burst, maxBuckets)
}

// clientOf names the client at addr (host:port) for the limits: its IPv4
// address, or its IPv6 /64, since a single IPv6 host is commonly handed a
// whole /64 to pick addresses from.
func clientOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	prefix, _ := ip.Prefix(64)
	return prefix.String()
}

// limitListener accepts at most max connections at once, waiting for one
// to close beyond that, and at most perAddress from one client address,
// closing any more at once.
type limitListener struct {
	net.Listener
	perAddress int
	slots      chan struct{}
	closed     chan struct{}
	closeOnce  sync.Once

	mu   sync.Mutex
	open map[string]int
}

func newLimitListener(l net.Listener, max, perAddress int) *limitListener {
	return &limitListener{Listener: l, perAddress: perAddress, slots: make(chan struct{}, max),
		closed: make(chan struct{}), open: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.closed:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		from := clientOf(c.RemoteAddr().String())
		l.mu.Lock()
		admitted := l.open[from] < l.perAddress
		if admitted {
			l.open[from]++
		}
		l.mu.Unlock()
		if admitted {
			return &limitedConn{Conn: c, release: func() { l.release(from) }}, nil
		}
		_ = c.Close()
		<-l.slots
	}
}

// release frees the connection slot of a client at from.
func (l *limitListener) release(from string) {
	l.mu.Lock()
	if l.open[from]--; l.open[from] <= 0 {
		delete(l.open, from)
	}
	l.mu.Unlock()
	<-l.slots
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitedConn gives its slot back when closed, once.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
