package testenv

import (
	"net"
	"sync"
)

// Proxy forwards TCP connections to a target address until it is cut, which
// makes the target unreachable for whoever dials the proxy exactly as a
// stopped server or a partition that resets connections would: open
// connections break and new ones are refused. Restore listens again on the
// same address. Hold is the silent partition instead: nothing breaks and
// nothing arrives, until Release.
type Proxy struct {
	// Addr is the host:port to dial instead of the target.
	Addr string

	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	// held, while the proxy holds, closes on Release.
	held chan struct{}
}

// NewProxy starts a proxy to target and stops it when the test ends.
func NewProxy(t TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{Addr: FreeAddr(t), target: target, conns: map[net.Conn]struct{}{}}
	if err := p.Restore(); err != nil {
		t.Fatalf("starting proxy to %s: %v", target, err)
	}
	t.Cleanup(p.Cut)
	return p
}

// Restore accepts connections again.
func (p *Proxy) Restore() error {
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go p.accept(ln)
	return nil
}

// Cut closes the listener and every forwarded connection.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Hold stops forwarding without closing anything, as a partition that
// drops packets does: what is sent waits in flight, and new connections
// are accepted but reach nothing, until Release. Whoever dials the proxy
// learns of it only from its own timeouts.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// Release forwards again what Hold kept waiting, and what comes after.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

// pass waits while the proxy holds.
func (p *Proxy) pass() {
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	if held != nil {
		<-held
	}
}

func (p *Proxy) accept(ln net.Listener) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		p.pass()
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(ln, in, out) {
			continue
		}
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// track records a forwarded pair unless the proxy was cut meanwhile.
func (p *Proxy) track(ln net.Listener, conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != ln {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.pass()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
