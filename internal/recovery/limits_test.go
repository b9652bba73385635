package recovery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// serving serves h as the endpoint does, on a loopback port within l,
// until the test ends; it returns the address and a TLS configuration that
// trusts the endpoint.
func serving(t *testing.T, h http.Handler, l limits) (string, *tls.Config) {
	g := NewWithT(t)
	dir, ca := testenv.ServingCertificate(t)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	g.Expect(err).NotTo(HaveOccurred())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, ln, h, func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }, l.orDefaults())
	}()
	t.Cleanup(func() {
		cancel()
		g.Expect(<-done).To(Succeed())
	})
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(ca)).To(BeTrue())
	return ln.Addr().String(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// dial opens a TLS connection to addr from local (an IP address) within
// timeout.
func dial(addr, local string, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := &tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}, Config: cfg}
	return d.DialContext(ctx, "tcp", addr)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestIdleAndStalledConnectionsAreClosed: a connection kept alive after its
// answer is closed after the idle timeout, and one whose headers or body
// stall after the read timeout.
func TestIdleAndStalledConnectionsAreClosed(t *testing.T) {
	g := NewWithT(t)
	addr, cfg := serving(t, newEndpoint(limits{}), limits{readTimeout: 300 * time.Millisecond, idleTimeout: 300 * time.Millisecond})
	for name, sent := range map[string]string{
		"idle after its answer": "GET / HTTP/1.1\r\nHost: recovery\r\n\r\n",
		"stalled headers":       "POST " + Path + " HTTP/1.1\r\nHost: recovery\r\n",
		"stalled body":          "POST " + Path + " HTTP/1.1\r\nHost: recovery\r\nContent-Length: 100\r\n\r\n{",
	} {
		conn, err := dial(addr, "127.0.0.1", cfg, 5*time.Second)
		g.Expect(err).NotTo(HaveOccurred(), name)
		_, err = io.WriteString(conn, sent)
		g.Expect(err).NotTo(HaveOccurred(), name)
		g.Expect(conn.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
		_, err = io.Copy(io.Discard, conn)
		g.Expect(isTimeout(err)).To(BeFalse(), "%s: the endpoint closed the connection (%v)", name, err)
		conn.Close()
	}
}

// TestConnectionsAreBoundedPerAddressAndInAll: beyond its share, a client
// address's connection is closed at once; beyond the bound in all, a
// connection waits until another closes.
func TestConnectionsAreBoundedPerAddressAndInAll(t *testing.T) {
	g := NewWithT(t)
	addr, cfg := serving(t, newEndpoint(limits{}), limits{connections: 3, connectionsPerAddress: 2})
	first, err := dial(addr, "127.0.0.1", cfg, 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	defer first.Close()
	second, err := dial(addr, "127.0.0.1", cfg, 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	defer second.Close()
	_, err = dial(addr, "127.0.0.1", cfg, 5*time.Second)
	g.Expect(err).To(HaveOccurred(), "a third connection from one address")
	g.Expect(isTimeout(err)).To(BeFalse(), "closed at once: %v", err)

	other, err := dial(addr, "127.0.0.2", cfg, 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred(), "another address has its own share")
	defer other.Close()
	_, err = dial(addr, "127.0.0.3", cfg, 500*time.Millisecond)
	g.Expect(isTimeout(err)).To(BeTrue(), "beyond the bound in all, a connection waits: %v", err)

	first.Close()
	g.Eventually(func() error {
		conn, err := dial(addr, "127.0.0.3", cfg, 2*time.Second)
		if err == nil {
			conn.Close()
		}
		return err
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
}
