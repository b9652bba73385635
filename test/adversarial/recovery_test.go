package adversarial_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/recovery"
)

// lostCluster is the Remote of team-a the recovery attacks aim at: it was
// registered through a RegistrationToken of its own, and the test holds its
// recovery key as the cluster's agent would.
const lostCluster = "lost"

// recoveryClient talks to the manager's recovery endpoint from the local
// address from: every 127.0.0.0/8 address is this host's, so each stands
// for another client on the network.
func (f *fleet) recoveryClient(g Gomega, from string) *http.Client {
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(f.recoveryCA)).To(BeTrue())
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		DialContext: dialer.DialContext, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// recoverPost sends body to the recovery endpoint from the local address
// from and returns the status and body of the answer.
func (f *fleet) recoverPost(g Gomega, from string, body []byte) (int, string) {
	resp, err := f.recoveryClient(g, from).Post(f.recoveryURL+recovery.Path, "application/json", bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(out))
}

// statusOf posts body to the recovery endpoint with c and returns the
// answer's status, 0 for a connection that ended without one; safe to call
// from any goroutine.
func (f *fleet) statusOf(c *http.Client, body []byte) int {
	resp, err := c.Post(f.recoveryURL+recovery.Path, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// encoded is a recovery request as a client sends it.
func encoded(g Gomega, req recovery.Request) []byte {
	body, err := json.Marshal(req)
	g.Expect(err).NotTo(HaveOccurred())
	return body
}

// newKey is a fresh recovery key.
func newKey(g Gomega) ed25519.PrivateKey {
	key, err := recovery.NewKey()
	g.Expect(err).NotTo(HaveOccurred())
	return key
}

// recoveryKeyOf is the public recovery key Remote ns/name names now.
func recoveryKeyOf(ctx context.Context, g Gomega, f *fleet, ns, name string) string {
	remote := &fleeetv1.Remote{}
	g.Expect(f.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, remote)).To(Succeed())
	return remote.Annotations[fleeetv1.RecoveryKeyAnnotation]
}

// refusedRecovery asserts the endpoint gave its one refusal, which tells
// the client nothing about why, and that the Remote still names key.
func refusedRecovery(ctx context.Context, g Gomega, f *fleet, status int, body, key string) string {
	g.Expect(status).To(Equal(http.StatusForbidden), body)
	g.Expect(body).To(Equal("recovery refused"))
	g.Expect(recoveryKeyOf(ctx, g, f, tenantA, lostCluster)).To(Equal(key), "the recovery key is unchanged")
	return fmt.Sprintf("%d %s; the Remote's recovery key is unchanged", status, body)
}

// recovered asserts a recovery was answered with a first credential of the
// cluster's identity, and returns it.
func recovered(g Gomega, status int, body string) recovery.Response {
	g.Expect(status).To(Equal(http.StatusOK), body)
	var resp recovery.Response
	g.Expect(json.Unmarshal([]byte(body), &resp)).To(Succeed())
	g.Expect(resp.Token).NotTo(BeEmpty())
	return resp
}

// registerLost registers cluster lost into team-a as its agent would,
// through a RegistrationToken of its own, naming the public half of a
// recovery key the test keeps as the agent keeps it, and returns that key.
func (f *fleet) registerLost(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	values := f.token(t, tenantA, lostCluster, fleeetv1.RegistrationTokenSpec{RemoteLabels: map[string]string{"env": "lost"}})
	key := newKey(g)
	g.Expect(bearer(t, f.mgmt, values["token"].(string)).Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{
		Namespace: tenantA, Name: lostCluster,
		Labels:      map[string]string{"env": "lost", fleeetv1.RegistrationTokenLabel: lostCluster},
		Annotations: map[string]string{fleeetv1.RecoveryKeyAnnotation: recovery.PublicKey(key)}}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(f.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: fleeetv1.RemoteIdentityName(lostCluster)}, &corev1.ServiceAccount{})).To(Succeed())
	}, timeout, poll).Should(Succeed(), f.logs)
	return key
}

// recoveryAttacks aim at the manager's recovery endpoint, an HTTPS port
// every replica serves to anyone, which hands a cluster's identity to
// whoever proves the cluster's recovery key. The lost cluster's own
// recoveries run among them (the agent's side, with key as it holds it)
// and must get through every flood. The cases run in order: each leaves
// the key where the next expects it.
func recoveryAttacks(ctx context.Context, f *fleet, key ed25519.PrivateKey) []attack {
	const anyone = "any network client, no credentials"
	const thief = "a network client holding a recovery request cluster lost sent, captured on the wire"
	const cluster = "cluster lost of team-a, holding its own recovery key"
	// from* are the client addresses: the cluster's, and an attacker's.
	const fromCluster, fromAttacker = "127.0.0.1", "127.0.0.2"
	current := func(g Gomega) string { return recoveryKeyOf(ctx, g, f, tenantA, lostCluster) }
	var captured []byte // the request that last recovered the cluster
	var retired ed25519.PrivateKey
	// untilNotBusy sends body as an agent does, again after each 429 (a
	// Remote's allowance of signed requests refills one every 10 s), and
	// returns the first answer that was not for the rate.
	untilNotBusy := func(g Gomega, from string, body []byte) (status int, answer string) {
		g.Eventually(func() int {
			status, answer = f.recoverPost(g, from, body)
			return status
		}, time.Minute, time.Second).ShouldNot(Equal(http.StatusTooManyRequests))
		return status, answer
	}
	forgedFor := func(g Gomega, ns, remote string) []byte {
		return encoded(g, recovery.NewRequest(ns, remote, newKey(g), newKey(g), time.Now()))
	}
	return []attack{
		{"forged-signature", anyone, "POST a request for team-a/lost signed with a key of the attacker's", func(t *testing.T, g Gomega) string {
			before := current(g)
			var status int
			var body string
			// The endpoint starts with the manager; it may still be coming up.
			g.Eventually(func() error {
				resp, err := f.recoveryClient(g, fromAttacker).Post(f.recoveryURL+recovery.Path, "application/json", bytes.NewReader(forgedFor(g, tenantA, lostCluster)))
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				out, _ := io.ReadAll(resp.Body)
				status, body = resp.StatusCode, strings.TrimSpace(string(out))
				return nil
			}).Should(Succeed())
			return refusedRecovery(ctx, g, f, status, body, before)
		}},
		{"unknown-remote-answered-like-a-forgery", anyone, "POST requests for team-a/no-such-cluster and for an unknown namespace", func(t *testing.T, g Gomega) string {
			before := current(g)
			for _, target := range [][2]string{{tenantA, "no-such-cluster"}, {"no-such-namespace", lostCluster}} {
				status, body := f.recoverPost(g, fromAttacker, forgedFor(g, target[0], target[1]))
				refusedRecovery(ctx, g, f, status, body, before)
			}
			return "403 recovery refused for both, the same answer as a forgery: whether a Remote exists is not told"
		}},
		{"other-tenants-remote-with-own-key", cluster, "POST a request for team-b/edge signed with cluster lost's own key", func(t *testing.T, g Gomega) string {
			before := current(g)
			otherBefore := recoveryKeyOf(ctx, g, f, tenantB, "edge")
			status, body := f.recoverPost(g, fromAttacker, encoded(g, recovery.NewRequest(tenantB, "edge", key, newKey(g), time.Now())))
			g.Expect(recoveryKeyOf(ctx, g, f, tenantB, "edge")).To(Equal(otherBefore), "team-b/edge's key is unchanged")
			return refusedRecovery(ctx, g, f, status, body, before)
		}},
		{"stale-request", thief, "POST a request for team-a/lost signed with its current key an hour ago", func(t *testing.T, g Gomega) string {
			before := current(g)
			status, body := f.recoverPost(g, fromAttacker, encoded(g, recovery.NewRequest(tenantA, lostCluster, key, newKey(g), time.Now().Add(-time.Hour))))
			return refusedRecovery(ctx, g, f, status, body, before)
		}},
		{"body-beyond-the-cap", anyone, "POST a 64 KiB request, and one that says it is 64 KiB", func(t *testing.T, g Gomega) string {
			big := append([]byte(`{"namespace":"`), bytes.Repeat([]byte("a"), 64<<10)...)
			status, body := f.recoverPost(g, fromAttacker, append(big, `"}`...))
			g.Expect(status).To(Equal(http.StatusRequestEntityTooLarge), body)
			return fmt.Sprintf("%d %s", status, body)
		}},
		{"racing-requests-rotate-once", thief, "POST 6 requests signed with cluster lost's current key at once (copies of its request, re-signed), each naming another new key", func(t *testing.T, g Gomega) string {
			type answer struct {
				status int
				next   ed25519.PrivateKey
			}
			answers := make(chan answer, 6)
			var wg sync.WaitGroup
			attacker := f.recoveryClient(g, fromAttacker)
			for range 6 {
				next := newKey(g)
				body := encoded(g, recovery.NewRequest(tenantA, lostCluster, key, next, time.Now()))
				wg.Go(func() {
					answers <- answer{f.statusOf(attacker, body), next}
				})
			}
			wg.Wait()
			close(answers)
			var won []ed25519.PrivateKey
			statuses := map[int]int{}
			for a := range answers {
				statuses[a.status]++
				if a.status == http.StatusOK {
					won = append(won, a.next)
				}
			}
			g.Expect(won).To(HaveLen(1), "one request wins: %v", statuses)
			g.Expect(statuses[http.StatusForbidden]+statuses[http.StatusTooManyRequests]).To(Equal(5), "%v", statuses)
			g.Expect(current(g)).To(Equal(recovery.PublicKey(won[0])), "the key is the winner's")
			// The test, having sent them all, holds the winner's key as
			// the cluster would have.
			key = won[0]
			return fmt.Sprintf("answered %v (status: count): one rotation, to the winner's key", statuses)
		}},
		{"flood-keeps-no-cluster-out", anyone, "POST 250 forged requests for team-a/lost from one address, 50 at a time, then the cluster recovers from its own", func(t *testing.T, g Gomega) string {
			before := current(g)
			counts := map[int]int{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			slots := make(chan struct{}, 50)
			attacker := f.recoveryClient(g, fromAttacker)
			for range 250 {
				slots <- struct{}{}
				body := forgedFor(g, tenantA, lostCluster)
				wg.Go(func() {
					defer func() { <-slots }()
					status := f.statusOf(attacker, body)
					mu.Lock()
					counts[status]++
					mu.Unlock()
				})
			}
			wg.Wait()
			g.Expect(counts).To(HaveKey(http.StatusTooManyRequests), "the attacker's address runs out of its allowance")
			g.Expect(counts).NotTo(HaveKey(http.StatusOK))
			g.Expect(current(g)).To(Equal(before))
			// The cluster, from its own address, at once.
			next := newKey(g)
			captured = encoded(g, recovery.NewRequest(tenantA, lostCluster, key, next, time.Now()))
			status, answer := untilNotBusy(g, fromCluster, captured)
			resp := recovered(g, status, answer)
			g.Expect(current(g)).To(Equal(recovery.PublicKey(next)), "the key is rotated to the one the cluster named")
			// The credential is the cluster's identity, and only its.
			as := bearer(t, f.mgmt, resp.Token)
			g.Expect(as.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: lostCluster}, &fleeetv1.Remote{})).To(Succeed())
			refusedByRBAC(g, as.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "edge"}, &fleeetv1.Remote{}))
			g.Eventually(func(g Gomega) {
				events := &eventsv1.EventList{}
				g.Expect(f.mgmt.Client.List(ctx, events, client.InNamespace(tenantA))).To(Succeed())
				g.Expect(events.Items).To(ContainElement(And(HaveField("Regarding.Name", lostCluster),
					HaveField("Reason", fleeetv1.ReasonRecovered), HaveField("Note", ContainSubstring(fromCluster)))))
			}).Should(Succeed())
			retired, key = key, next
			return fmt.Sprintf("flood answered %v (status: count; 0 is a closed connection); the cluster then recovered at once, "+
				"its credential reads its own Remote only, and the recovery is a Recovered event naming its address", counts)
		}},
		{"replayed-request", thief, "POST the request that just recovered cluster lost, three times", func(t *testing.T, g Gomega) string {
			before := current(g)
			// The first replay within two minutes is taken for the agent
			// resending after a lost answer: one more first credential,
			// no rotation (the stated trade-off). Never a second.
			status, answer := untilNotBusy(g, fromAttacker, captured)
			recovered(g, status, answer)
			g.Expect(current(g)).To(Equal(before), "no rotation")
			for range 2 {
				// A 429 is a refusal too, of a copy the manager's cache
				// still took for the first; it is asked again until the
				// answer is the endpoint's word on the request itself.
				status, body := untilNotBusy(g, fromAttacker, captured)
				refusedRecovery(ctx, g, f, status, body, before)
			}
			return "answered once more within the answer grace (a 10-minute first credential, no key), then 403 recovery refused twice"
		}},
		{"old-key-after-recovery", thief, "POST a fresh request signed with the key cluster lost rotated away", func(t *testing.T, g Gomega) string {
			before := current(g)
			status, body := untilNotBusy(g, fromAttacker, encoded(g, recovery.NewRequest(tenantA, lostCluster, retired, newKey(g), time.Now())))
			return refusedRecovery(ctx, g, f, status, body, before)
		}},
		{"connections-beyond-the-per-address-cap", anyone, "open 140 connections from one address and send nothing", func(t *testing.T, g Gomega) string {
			host := strings.TrimPrefix(f.recoveryURL, "https://")
			dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, Timeout: 5 * time.Second}
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range 140 {
				c, err := dialer.Dial("tcp", host)
				g.Expect(err).NotTo(HaveOccurred())
				conns = append(conns, c)
			}
			// Those past the cap are closed at once: a read ends.
			closed := 0
			for _, c := range conns {
				_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
					closed++
				}
			}
			g.Expect(closed).To(BeNumerically(">=", 12), "connections past 128 from one address are closed")
			// Another client is still answered meanwhile.
			status, body := f.recoverPost(g, fromCluster, forgedFor(g, tenantA, lostCluster))
			g.Expect(status).To(Equal(http.StatusForbidden), body)
			return fmt.Sprintf("%d of 140 closed at once; another address was still answered (%d %s)", closed, status, body)
		}},
	}
}

// isTimeout tells a read that timed out from a closed connection.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
