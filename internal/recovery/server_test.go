package recovery

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// cluster is the management cluster the endpoint reads Remotes from.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, nil))
}

// endpoint is a recovery Server on the test cluster, within l, with the
// events and the log it wrote.
type endpoint struct {
	*Server
	events *events.FakeRecorder
	mu     sync.Mutex
	log    strings.Builder
}

func newEndpoint(l limits) *endpoint {
	e := &endpoint{events: events.NewFakeRecorder(100)}
	e.Server = &Server{Client: cluster.Client, Reader: cluster.Client, Recorder: e.events, Grace: DefaultGrace, limits: l,
		Log: funcr.New(func(prefix, args string) {
			e.mu.Lock()
			defer e.mu.Unlock()
			fmt.Fprintln(&e.log, prefix, args)
		}, funcr.Options{})}
	return e
}

// logged is everything the endpoint logged so far.
func (e *endpoint) logged() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.log.String()
}

// recorded is the number of events the endpoint recorded so far.
func (e *endpoint) recorded() int { return len(e.events.Events) }

// ask sends body to h as a client at from (host:port) would.
func ask(h http.Handler, from string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	r.RemoteAddr = from
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// encode is req as sent.
func encode(g Gomega, req Request) []byte {
	body, err := json.Marshal(req)
	g.Expect(err).NotTo(HaveOccurred())
	return body
}

func newKey(g Gomega) ed25519.PrivateKey {
	key, err := NewKey()
	g.Expect(err).NotTo(HaveOccurred())
	return key
}

// newRemote creates pull Remote name in ns naming a new recovery key, and
// its identity, and returns the key.
func newRemote(t *testing.T, ns, name string) ed25519.PrivateKey {
	g := NewWithT(t)
	key := newKey(g)
	g.Expect(cluster.Client.Create(t.Context(), &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Annotations: map[string]string{fleeetv1.RecoveryKeyAnnotation: PublicKey(key)}}})).To(Succeed())
	g.Expect(cluster.Client.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns,
		Name: fleeetv1.RemoteIdentityName(name)}})).To(Succeed())
	return key
}

// keyOf is the recovery key Remote name in ns names now.
func keyOf(g Gomega, ns, name string) string {
	remote := &fleeetv1.Remote{}
	g.Expect(cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, remote)).To(Succeed())
	return remote.Annotations[fleeetv1.RecoveryKeyAnnotation]
}

// from is the address of the i-th of many clients.
func from(i int) string { return fmt.Sprintf("198.51.%d.%d:40000", i/250, i%250) }

// TestARemotesAllowanceIsItsOwn: requests signed with one Remote's key
// beyond its allowance are answered 429, and another Remote's agent
// recovers meanwhile.
func TestARemotesAllowanceIsItsOwn(t *testing.T) {
	g := NewWithT(t)
	ns := cluster.Namespace(t, "recovery", nil)
	busy, quiet := newRemote(t, ns, "busy"), newRemote(t, ns, "quiet")
	e := newEndpoint(limits{})

	rotated := 0
	for i := range 10 {
		next := newKey(g)
		w := ask(e, from(i), encode(g, NewRequest(ns, "busy", busy, next, time.Now())))
		if w.Code == http.StatusTooManyRequests {
			continue
		}
		g.Expect(w.Code).To(Equal(http.StatusOK), w.Body.String())
		busy = next
		rotated++
	}
	g.Expect(rotated).To(Equal(defaultLimits.perRemote.burst), "the Remote's burst, then 429")

	w := ask(e, from(100), encode(g, NewRequest(ns, "quiet", quiet, newKey(g), time.Now())))
	g.Expect(w.Code).To(Equal(http.StatusOK), "another Remote's allowance is untouched: %s", w.Body.String())
}

// TestForgedRequestsNamingARemoteNeverKeepItsAgentOut: a flood of requests
// naming a Remote, signed with keys it does not name, from many addresses,
// is refused without using up the Remote's allowance: its agent recovers
// right after. Neither the log nor an event holds the credential.
func TestForgedRequestsNamingARemoteNeverKeepItsAgentOut(t *testing.T) {
	g := NewWithT(t)
	ns := cluster.Namespace(t, "recovery", nil)
	key := newRemote(t, ns, "edge")
	e := newEndpoint(limits{})

	for i := range 200 {
		w := ask(e, from(i), encode(g, NewRequest(ns, "edge", newKey(g), newKey(g), time.Now())))
		g.Expect(w.Code).To(Equal(http.StatusForbidden))
		g.Expect(w.Body.String()).To(Equal(refusedMessage + "\n"))
	}
	g.Expect(keyOf(g, ns, "edge")).To(Equal(PublicKey(key)))

	w := ask(e, from(0), encode(g, NewRequest(ns, "edge", key, newKey(g), time.Now())))
	g.Expect(w.Code).To(Equal(http.StatusOK), w.Body.String())
	var resp Response
	g.Expect(json.Unmarshal(w.Body.Bytes(), &resp)).To(Succeed())
	g.Expect(resp.Token).NotTo(BeEmpty())
	g.Expect(e.logged()).To(ContainSubstring("not the Remote's current recovery key"))
	g.Expect(e.logged()).NotTo(ContainSubstring(resp.Token))
	g.Expect(<-e.events.Events).NotTo(ContainSubstring(resp.Token))
}

// TestAnAddressAllowanceIsItsOwn: requests from one address beyond its
// allowance are answered 429 before they are read; another address, or
// another IPv6 /64, is still answered. Addresses of one /64 are one client.
func TestAnAddressAllowanceIsItsOwn(t *testing.T) {
	g := NewWithT(t)
	e := newEndpoint(limits{perAddress: allowance{rate: 1e-6, burst: 3}})
	junk := []byte("{")
	for _, c := range []struct {
		from string
		want int
	}{
		{"192.0.2.1:1000", http.StatusForbidden},
		{"192.0.2.1:1001", http.StatusForbidden},
		{"192.0.2.1:1002", http.StatusForbidden},
		{"192.0.2.1:1003", http.StatusTooManyRequests},
		{"192.0.2.2:1000", http.StatusForbidden},
		{"[2001:db8::1]:1000", http.StatusForbidden},
		{"[2001:db8::2]:1000", http.StatusForbidden},
		{"[2001:db8::3]:1000", http.StatusForbidden},
		{"[2001:db8::ffff:4]:1000", http.StatusTooManyRequests},
		{"[2001:db8:0:1::1]:1000", http.StatusForbidden},
	} {
		g.Expect(ask(e, c.from, junk).Code).To(Equal(c.want), c.from)
	}
}

// TestAThousandClustersBehindOneAddressRecoverWithinAMinute: with the
// default allowance of an address, 1000 agents behind one NAT address,
// each asking again 5 s after a 429 (the agent's retry after a failure),
// are all let through within a minute.
func TestAThousandClustersBehindOneAddressRecoverWithinAMinute(t *testing.T) {
	g := NewWithT(t)
	b := newBuckets(defaultLimits.perAddress)
	start := time.Now()
	next := make([]time.Duration, 1000)
	for i := range next {
		next[i] = time.Duration(i) * 5 * time.Millisecond // all within the first 5 s
	}
	waiting := len(next)
	at := time.Duration(0)
	for ; waiting > 0 && at < 10*time.Minute; at += 10 * time.Millisecond {
		for i, n := range next {
			if n < 0 || n > at {
				continue
			}
			if b.For("203.0.113.1").AllowN(start.Add(at), 1) {
				next[i], waiting = -1, waiting-1
			} else {
				next[i] = at + 5*time.Second
			}
		}
	}
	g.Expect(at).To(BeNumerically("<=", time.Minute))
}

// TestAnOversizedRequestIsRefusedWith413: a body beyond maxBody is refused
// with 413, whether its length is declared or not, and the client gets that
// answer rather than a connection reset while it is still sending the body
// (a client that asks to close after its request would get one in about a
// third of tries if the body were left unread).
func TestAnOversizedRequestIsRefusedWith413(t *testing.T) {
	g := NewWithT(t)
	l := limits{perAddress: allowance{rate: 1000, burst: 1000}}
	addr, cfg := serving(t, newEndpoint(l), l)
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: cfg}}
	body := []byte(`{"namespace":"` + strings.Repeat("a", 64<<10) + `"}`)
	for i := range 40 {
		var r io.Reader = bytes.NewReader(body) // declared length
		if i%2 == 1 {
			r = io.MultiReader(r) // chunked: read until the cap
		}
		resp, err := c.Post("https://"+addr+Path, "application/json", r)
		g.Expect(err).NotTo(HaveOccurred(), "try %d", i)
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusRequestEntityTooLarge), "try %d", i)
	}
}

// TestRacingRequestsRotateTheKeyOnce: requests signed with the current key
// sent at once, each naming a new key of its own, rotate the key once, to
// the one winner's key; copies of one request sent at once rotate it once
// too, and are answered at most twice (the rotation, and once more).
func TestRacingRequestsRotateTheKeyOnce(t *testing.T) {
	g := NewWithT(t)
	ns := cluster.Namespace(t, "recovery", nil)
	key := newRemote(t, ns, "edge")
	e := newEndpoint(limits{perRemote: allowance{rate: 1, burst: 100}})

	race := func(reqs []Request) []int {
		codes := make([]int, len(reqs))
		var wg sync.WaitGroup
		for i, req := range reqs {
			body := encode(g, req)
			wg.Go(func() { codes[i] = ask(e, from(i), body).Code })
		}
		wg.Wait()
		return codes
	}
	var reqs []Request
	nexts := map[string]ed25519.PrivateKey{}
	for range 8 {
		next := newKey(g)
		nexts[PublicKey(next)] = next
		reqs = append(reqs, NewRequest(ns, "edge", key, next, time.Now()))
	}
	codes := race(reqs)
	g.Expect(codes).To(ContainElement(http.StatusOK))
	var won []string
	for i, code := range codes {
		if code == http.StatusOK {
			won = append(won, reqs[i].NewKey)
		} else {
			g.Expect(code).To(Equal(http.StatusForbidden))
		}
	}
	g.Expect(won).To(HaveLen(1), "one rotation")
	g.Expect(keyOf(g, ns, "edge")).To(Equal(won[0]))
	g.Expect(e.recorded()).To(Equal(1))

	same := NewRequest(ns, "edge", nexts[won[0]], newKey(g), time.Now())
	codes = race([]Request{same, same, same, same, same, same, same, same})
	granted := 0
	for _, code := range codes {
		if code == http.StatusOK {
			granted++
		} else {
			g.Expect(code).To(Equal(http.StatusForbidden))
		}
	}
	g.Expect(granted).To(BeNumerically(">=", 1))
	g.Expect(granted).To(BeNumerically("<=", 2), "the rotation, and once more at most")
	g.Expect(keyOf(g, ns, "edge")).To(Equal(same.NewKey))
	g.Expect(e.recorded()).To(Equal(1 + granted))
}

// TestALostAnswerIsAnsweredOnceMore: the request that rotated the key is
// answered once more, without rotating again; a third time, or after the
// grace, or once the Remote names another key, it is refused, and so is
// any request signed with the old key naming another new key.
func TestALostAnswerIsAnsweredOnceMore(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := cluster.Namespace(t, "recovery", nil)
	key := newRemote(t, ns, "edge")
	e := newEndpoint(limits{perRemote: allowance{rate: 1, burst: 100}})
	answer := func(req Request) (int, string) {
		w := ask(e, from(0), encode(g, req))
		return w.Code, w.Body.String()
	}

	next := newKey(g)
	rotating := NewRequest(ns, "edge", key, next, time.Now())
	code, first := answer(rotating)
	g.Expect(code).To(Equal(http.StatusOK))
	code, again := answer(rotating)
	g.Expect(code).To(Equal(http.StatusOK), "answered once more")
	g.Expect(again).NotTo(Equal(first), "with a new credential")
	g.Expect(keyOf(g, ns, "edge")).To(Equal(PublicKey(next)), "and no rotation")
	code, _ = answer(rotating)
	g.Expect(code).To(Equal(http.StatusForbidden), "only once more")

	key, next = next, newKey(g)
	code, _ = answer(NewRequest(ns, "edge", key, next, time.Now()))
	g.Expect(code).To(Equal(http.StatusOK))
	code, _ = answer(NewRequest(ns, "edge", key, newKey(g), time.Now()))
	g.Expect(code).To(Equal(http.StatusForbidden), "the old key naming another key")
	g.Expect(keyOf(g, ns, "edge")).To(Equal(PublicKey(next)))

	// Once the Remote names another key (fleetctl reenrol), the request
	// that made the last rotation gets nothing more.
	key, next = next, newKey(g)
	rotating = NewRequest(ns, "edge", key, next, time.Now())
	code, _ = answer(rotating)
	g.Expect(code).To(Equal(http.StatusOK))
	reenrolled := newKey(g)
	g.Expect(testenv.Change(ctx, cluster.Client, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}},
		func(r *fleeetv1.Remote) { r.Annotations[fleeetv1.RecoveryKeyAnnotation] = PublicKey(reenrolled) })).To(Succeed())
	code, _ = answer(rotating)
	g.Expect(code).To(Equal(http.StatusForbidden), "after reenrol")

	// After the grace, likewise.
	late := newEndpoint(limits{answerGrace: time.Nanosecond})
	rotating = NewRequest(ns, "edge", reenrolled, newKey(g), time.Now())
	g.Expect(ask(late, from(0), encode(g, rotating)).Code).To(Equal(http.StatusOK))
	g.Expect(ask(late, from(0), encode(g, rotating)).Code).To(Equal(http.StatusForbidden), "after the grace")
}

// TestRecoverSendsAgainWhenTheAnswerIsLost: the endpoint rotates the key
// but its answer never reaches the agent; Recover sends the same request
// again, is answered once more, and the Remote names the key it returns
// the credential for.
func TestRecoverSendsAgainWhenTheAnswerIsLost(t *testing.T) {
	g := NewWithT(t)
	ns := cluster.Namespace(t, "recovery", nil)
	key := newRemote(t, ns, "edge")
	e := newEndpoint(limits{})
	var lost atomic.Bool
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lost.CompareAndSwap(false, true) {
			e.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		e.ServeHTTP(w, r)
	}))
	defer ts.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})

	next := newKey(g)
	token, err := Recover(t.Context(), ts.URL, ca, ns, "edge", key, next)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(token.Value).NotTo(BeEmpty())
	g.Expect(lost.Load()).To(BeTrue())
	g.Expect(keyOf(g, ns, "edge")).To(Equal(PublicKey(next)))
	g.Expect(e.recorded()).To(Equal(2), "the rotation, then the answer again")
}
