package testenv_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// echo serves, on a free address, an echo of every line it is sent.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A held proxy breaks nothing and passes nothing: a line sent meanwhile,
// and a connection opened meanwhile, arrive once it is released. A cut one
// breaks its connections and refuses new ones until restored.
func TestAProxyHoldsOrCutsTheLinkToItsTarget(t *testing.T) {
	g := NewWithT(t)
	p := testenv.NewProxy(t, echo(t))
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	// answer sends line on c and returns what comes back within wait.
	answer := func(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
		_, err := c.Write([]byte(line + "\n"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.SetReadDeadline(time.Now().Add(wait))).To(Succeed())
		return r.ReadString('\n')
	}

	c, r := dial()
	g.Expect(answer(c, r, "one", 5*time.Second)).To(Equal("one\n"))

	p.Hold()
	_, err := answer(c, r, "two", 300*time.Millisecond)
	g.Expect(err).To(MatchError(ContainSubstring("timeout")), "nothing passes while held")
	late, lateR := dial()
	_, err = answer(late, lateR, "three", 300*time.Millisecond)
	g.Expect(err).To(MatchError(ContainSubstring("timeout")), "a connection opened while held reaches nothing")
	p.Release()
	g.Expect(c.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
	g.Expect(r.ReadString('\n')).To(Equal("two\n"), "what was held arrives, on the same connection")
	g.Expect(late.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
	g.Expect(lateR.ReadString('\n')).To(Equal("three\n"))

	p.Cut()
	_, err = answer(c, r, "four", 5*time.Second)
	g.Expect(err).To(HaveOccurred(), "a cut breaks the connection")
	_, err = net.Dial("tcp", p.Addr)
	g.Expect(err).To(HaveOccurred(), "and refuses new ones")
	g.Expect(p.Restore()).To(Succeed())
	c, r = dial()
	g.Expect(answer(c, r, "five", 5*time.Second)).To(Equal("five\n"))
}
