package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fleeet-dev/fleeet/internal/ratelimit"
)

// goodToken is the one token the fake apiserver knows.
const goodToken = "the-one-good-token"

// noRights is the namespace where goodToken may read nothing.
const noRights = "no-rights"

// countingReviews is an apiserver stand-in that counts the TokenReviews it
// answers, knows only goodToken, and allows every SubjectAccessReview but
// those in namespace noRights.
func countingReviews(reviews *atomic.Int64) client.Client {
	return fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			switch o := obj.(type) {
			case *authenticationv1.TokenReview:
				reviews.Add(1)
				o.Status.Authenticated = o.Spec.Token == goodToken
				if o.Status.Authenticated {
					o.Status.User = authenticationv1.UserInfo{Username: "reader"}
				}
			case *authorizationv1.SubjectAccessReview:
				o.Status.Allowed = o.Spec.ResourceAttributes.Namespace != noRights
			default:
				return fmt.Errorf("unexpected %T", obj)
			}
			return nil
		},
	}).Build()
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// inClusterDashboard serves the in-cluster dashboard's login, logout and
// authorisation (not its pages, which need a cluster) over ts.
func inClusterDashboard(reviews *atomic.Int64, tls bool) (*server, *httptest.Server) {
	d := &server{reviewer: newReviewer(countingReviews(reviews), newLoginSessions(defaultSessionIdle, defaultSessionMaxAge), false)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", d.login)
	mux.HandleFunc("POST /logout", d.logout)
	mux.HandleFunc("/namespaces/{namespace}/", func(w http.ResponseWriter, r *http.Request) {
		if _, err := d.reviewer.reader(r.Context(), r, r.PathValue("namespace")); err != nil {
			refuse(w, err)
			return
		}
		fmt.Fprintln(w, "the fleet")
	})
	if tls {
		return d, httptest.NewTLSServer(mux)
	}
	return d, httptest.NewServer(mux)
}

func TestRandomTokensFromOneClientCostAtMostItsBurstOfTokenReviews(t *testing.T) {
	g := NewWithT(t)
	var reviews atomic.Int64
	_, ts := inClusterDashboard(&reviews, false)
	defer ts.Close()

	limited := 0
	for range 300 {
		req, err := http.NewRequest(http.MethodGet, ts.URL+"/namespaces/team-a/", nil)
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+randomToken())
		// A forged X-Forwarded-For names no other client: it is not trusted.
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.0.%d.%d", limited/250, limited%250))
		resp, err := ts.Client().Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			limited++
			g.Expect(resp.Header.Get("Retry-After")).To(MatchRegexp(`^[1-9][0-9]*$`))
		} else {
			g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
		}
	}
	// The burst, and what the rate refills while the loop runs.
	g.Expect(reviews.Load()).To(BeNumerically("<=", reviewBurstPerClient+5))
	g.Expect(limited).To(BeNumerically(">=", 300-reviewBurstPerClient-5))
}

func TestAnotherClientStillGetsItsTokenReviewed(t *testing.T) {
	g := NewWithT(t)
	var reviews atomic.Int64
	a := newReviewer(countingReviews(&reviews), newLoginSessions(time.Minute, time.Hour), false)
	now := time.Now()
	a.now = func() time.Time { return now }
	from := func(addr string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = addr
		return r
	}
	for range 2 * reviewBurstPerClient {
		_, _ = a.user(t.Context(), from("192.0.2.1:1000"), randomToken())
	}
	g.Expect(reviews.Load()).To(BeEquivalentTo(reviewBurstPerClient))
	_, err := a.user(t.Context(), from("192.0.2.1:2000"), randomToken())
	g.Expect(err).To(BeAssignableToTypeOf(rateLimited{}), "another port of the same address is the same client")

	user, err := a.user(t.Context(), from("192.0.2.2:1000"), goodToken)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(user.Username).To(Equal("reader"))

	// A token already reviewed costs nothing, even from a limited client.
	_, err = a.user(t.Context(), from("192.0.2.1:1000"), goodToken)
	g.Expect(err).NotTo(HaveOccurred())

	// The allowance refills with time.
	now = now.Add(2 * time.Second)
	_, err = a.user(t.Context(), from("192.0.2.1:1000"), randomToken())
	g.Expect(err).To(Equal(errUnauthenticated))
}

func TestForwardedForNamesTheClientOnlyWhenTrusted(t *testing.T) {
	g := NewWithT(t)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.2.3:5555"
	r.Header.Add("X-Forwarded-For", "203.0.113.9, 198.51.100.7")
	g.Expect(clientOf(r, false)).To(Equal("10.1.2.3"))
	g.Expect(clientOf(r, true)).To(Equal("198.51.100.7"), "the address the trusted proxy appended")
	r.Header.Set("X-Forwarded-For", "not an address")
	g.Expect(clientOf(r, true)).To(Equal("10.1.2.3"))
}

func TestTheClientsTrackedAreBoundedOldestFirst(t *testing.T) {
	g := NewWithT(t)
	l := newReviewLimits()
	l.Keys = ratelimit.NewPerKey(reviewsPerClient, reviewBurstPerClient, 3)
	now := time.Now()
	for range reviewBurstPerClient {
		g.Expect(l.Allow("first", now)).To(BeZero())
	}
	g.Expect(l.Allow("first", now)).To(BeNumerically(">", 0))
	for _, c := range []string{"second", "third", "fourth"} {
		g.Expect(l.Allow(c, now)).To(BeZero())
	}
	g.Expect(l.Keys.Len()).To(Equal(3))
	g.Expect(l.Keys.Holds("first")).To(BeFalse(), "the least recently seen client was dropped")
}

func TestEveryClientTogetherIsLimited(t *testing.T) {
	g := NewWithT(t)
	l := newReviewLimits()
	now := time.Now()
	allowed := 0
	for i := range 1000 {
		if l.Allow(fmt.Sprintf("2001:db8::%x", i), now) == 0 {
			allowed++
		}
	}
	g.Expect(allowed).To(Equal(reviewBurstInAll))
}

func TestTheReviewCacheIsBoundedAndKeyedByTheTokensHash(t *testing.T) {
	g := NewWithT(t)
	var reviews atomic.Int64
	a := newReviewer(countingReviews(&reviews), newLoginSessions(time.Minute, time.Hour), false)
	a.users.max = 5
	a.limits = ratelimit.NewShared(reviewsPerClient, 1000, reviewsInAll, 1000, maxTrackedClients)
	now := time.Now()
	a.now = func() time.Time { return now }
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	var tokens []string
	for range 50 {
		tokens = append(tokens, randomToken())
		_, _ = a.user(t.Context(), r, tokens[len(tokens)-1])
	}
	g.Expect(a.users.len()).To(Equal(5))
	for key := range a.users.entries {
		g.Expect(tokens).To(ContainElement(WithTransform(func(tok string) [32]byte { return sha256.Sum256([]byte(tok)) }, Equal(key))))
	}

	before := reviews.Load()
	_, _ = a.user(t.Context(), r, tokens[49])
	g.Expect(reviews.Load()).To(Equal(before), "a fresh answer is reused")
	now = now.Add(reviewTTL)
	_, _ = a.user(t.Context(), r, tokens[49])
	g.Expect(reviews.Load()).To(Equal(before+1), "an expired answer is asked again")
}

// login posts goodToken and namespace team-a to the login form and
// returns the session cookie.
func login(g Gomega, c *http.Client, base string) *http.Cookie {
	resp := postLogin(g, c, base, url.Values{"token": {goodToken}, "namespace": {"team-a"}})
	g.Expect(resp.StatusCode).To(Equal(http.StatusSeeOther))
	g.Expect(resp.Header.Get("Location")).To(Equal("/namespaces/team-a/"))
	g.Expect(resp.Cookies()).To(HaveLen(1))
	return resp.Cookies()[0]
}

// postLogin posts form to the login form, following no redirect.
func postLogin(g Gomega, c *http.Client, base string, form url.Values) *http.Response {
	noRedirect := *c
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noRedirect.PostForm(base+"/login", form)
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	return resp
}

func withCookie(g Gomega, c *http.Client, method, url string, cookie *http.Cookie) int {
	req, err := http.NewRequest(method, url, nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.AddCookie(cookie)
	resp, err := c.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	return resp.StatusCode
}

func TestTheSessionCookieHoldsARandomIdentifierNeverTheToken(t *testing.T) {
	for _, tls := range []bool{true, false} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) {
			g := NewWithT(t)
			var reviews atomic.Int64
			_, ts := inClusterDashboard(&reviews, tls)
			defer ts.Close()
			cookie := login(g, ts.Client(), ts.URL)
			g.Expect(cookie.Name).To(Equal(sessionCookie))
			g.Expect(cookie.Value).NotTo(ContainSubstring(goodToken))
			g.Expect(cookie.Value).To(MatchRegexp(`^[A-Za-z0-9_-]{43}$`), "256 random bits")
			g.Expect(cookie.HttpOnly).To(BeTrue())
			g.Expect(cookie.SameSite).To(Equal(http.SameSiteStrictMode))
			g.Expect(cookie.Secure).To(Equal(tls), "Secure whenever served over TLS")
			g.Expect(cookie.MaxAge).To(Equal(int(defaultSessionMaxAge.Seconds())))
			g.Expect(cookie.Path).To(Equal("/"))
			g.Expect(withCookie(g, ts.Client(), http.MethodGet, ts.URL+"/namespaces/team-a/", cookie)).To(Equal(http.StatusOK))

			second := login(g, ts.Client(), ts.URL)
			g.Expect(second.Value).NotTo(Equal(cookie.Value), "each login its own session")
		})
	}
}

func TestLogoutEndsTheSession(t *testing.T) {
	g := NewWithT(t)
	var reviews atomic.Int64
	_, ts := inClusterDashboard(&reviews, true)
	defer ts.Close()
	cookie := login(g, ts.Client(), ts.URL)
	kept := login(g, ts.Client(), ts.URL)
	grid := ts.URL + "/namespaces/team-a/"
	g.Expect(withCookie(g, ts.Client(), http.MethodGet, grid, cookie)).To(Equal(http.StatusOK))

	jar, err := cookiejar.New(nil)
	g.Expect(err).NotTo(HaveOccurred())
	c := *ts.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	u, _ := url.Parse(ts.URL)
	jar.SetCookies(u, []*http.Cookie{cookie})
	g.Expect(withCookie(g, &c, http.MethodPost, ts.URL+"/logout", cookie)).To(Equal(http.StatusSeeOther))
	g.Expect(jar.Cookies(u)).To(BeEmpty(), "the browser is told to drop the cookie")

	g.Expect(withCookie(g, ts.Client(), http.MethodGet, grid, cookie)).To(Equal(http.StatusUnauthorized), "a copy of the cookie opens nothing")
	g.Expect(withCookie(g, ts.Client(), http.MethodGet, grid, kept)).To(Equal(http.StatusOK), "other sessions go on")
	g.Expect(withCookie(g, ts.Client(), http.MethodGet, grid, &http.Cookie{Name: sessionCookie, Value: strings.Repeat("A", 43)})).
		To(Equal(http.StatusUnauthorized), "a forged identifier opens nothing")
}

func TestSessionsExpireIdleAndAtTheirMaximumAge(t *testing.T) {
	g := NewWithT(t)
	s := newLoginSessions(15*time.Minute, time.Hour)
	start := time.Now()

	idle, err := s.start(goodToken, "reader", start)
	g.Expect(err).NotTo(HaveOccurred())
	_, ok := s.token(idle, start.Add(14*time.Minute))
	g.Expect(ok).To(BeTrue())
	_, ok = s.token(idle, start.Add(29*time.Minute))
	g.Expect(ok).To(BeFalse(), "15 minutes unused")

	busy, err := s.start(goodToken, "reader", start)
	g.Expect(err).NotTo(HaveOccurred())
	for at := time.Duration(0); at < time.Hour; at += 10 * time.Minute {
		token, ok := s.token(busy, start.Add(at))
		g.Expect(ok).To(BeTrue(), "at %s", at)
		g.Expect(token).To(Equal(goodToken))
	}
	_, ok = s.token(busy, start.Add(time.Hour))
	g.Expect(ok).To(BeFalse(), "an hour after login, however busy")
	g.Expect(s.byID).To(BeEmpty(), "ended sessions are forgotten")
}

// TestOneIdentitysSessionsNeverEndAnothers: an identity opening session
// after session ends only its own oldest ones; everyone else's go on.
func TestOneIdentitysSessionsNeverEndAnothers(t *testing.T) {
	g := NewWithT(t)
	s := newLoginSessions(time.Minute, time.Hour)
	now := time.Now()
	other, err := s.start("other-token", "other", now)
	g.Expect(err).NotTo(HaveOccurred())
	var flood []string
	for i := range maxSessions + 100 {
		id, err := s.start("flood-token", "flood", now.Add(time.Duration(i)*time.Millisecond))
		g.Expect(err).NotTo(HaveOccurred())
		flood = append(flood, id)
	}
	g.Expect(s.byID).To(HaveLen(1 + maxSessionsPerIdentity))
	token, ok := s.token(other, now.Add(time.Second))
	g.Expect(ok).To(BeTrue(), "another identity's session goes on")
	g.Expect(token).To(Equal("other-token"))
	_, ok = s.token(flood[0], now.Add(time.Second))
	g.Expect(ok).To(BeFalse(), "the flooding identity's oldest session ended")
	_, ok = s.token(flood[len(flood)-1], now.Add(time.Second))
	g.Expect(ok).To(BeTrue())
}

// TestTheSessionsKeptAreBounded: while every session kept is live, a login
// is refused rather than anyone's session ended.
func TestTheSessionsKeptAreBounded(t *testing.T) {
	g := NewWithT(t)
	s := newLoginSessions(time.Minute, time.Hour)
	s.max = 3
	now := time.Now()
	first, err := s.start("a", "a", now)
	g.Expect(err).NotTo(HaveOccurred())
	for _, identity := range []string{"b", "c"} {
		_, err := s.start(identity, identity, now)
		g.Expect(err).NotTo(HaveOccurred())
	}
	_, err = s.start("d", "d", now)
	g.Expect(err).To(Equal(errTooManySessions))
	_, ok := s.token(first, now.Add(time.Second))
	g.Expect(ok).To(BeTrue(), "no one's session ended")
	_, err = s.start("d", "d", now.Add(2*time.Minute))
	g.Expect(err).NotTo(HaveOccurred(), "once sessions expire there is room")
}

// TestATokenThatMayReadNothingGetsNoSession: a login naming a namespace the
// token may not read, or none, is refused and opens no session.
func TestATokenThatMayReadNothingGetsNoSession(t *testing.T) {
	g := NewWithT(t)
	var reviews atomic.Int64
	d, ts := inClusterDashboard(&reviews, true)
	defer ts.Close()
	for _, ns := range []string{noRights, ""} {
		resp := postLogin(g, ts.Client(), ts.URL, url.Values{"token": {goodToken}, "namespace": {ns}})
		g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden), ns)
		g.Expect(resp.Cookies()).To(BeEmpty(), ns)
	}
	g.Expect(d.reviewer.sessions.byID).To(BeEmpty())
}

func TestTheDashboardListensBeyondLoopbackOnlyWithAuthenticationOrTheRiskNamed(t *testing.T) {
	g := NewWithT(t)
	loopback := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8000}
	loopback6 := &net.TCPAddr{IP: net.ParseIP("::1"), Port: 8000}
	any := &net.TCPAddr{IP: net.IPv4zero, Port: 8000}
	lan := &net.TCPAddr{IP: net.ParseIP("192.168.1.10"), Port: 8000}
	for _, c := range []struct {
		o    options
		addr *net.TCPAddr
		want string // empty: allowed
	}{
		{options{}, loopback, ""},
		{options{}, loopback6, ""},
		{options{}, any, "insecure-expose-my-credentials"},
		{options{}, lan, "with your credentials"},
		{options{certFile: "tls.crt"}, lan, "with your credentials"},
		{options{exposeCredentials: true}, lan, ""},
		{options{inCluster: true, certFile: "tls.crt"}, any, ""},
		{options{inCluster: true}, any, "insecure-plain-http"},
		{options{inCluster: true, plainHTTP: true}, any, ""},
		{options{inCluster: true}, loopback, ""},
	} {
		c.o.address = c.addr.String()
		err := c.o.mayListenOn(c.addr)
		if c.want == "" {
			g.Expect(err).NotTo(HaveOccurred(), "%+v", c.o)
		} else {
			g.Expect(err).To(MatchError(ContainSubstring(c.want)), "%+v", c.o)
		}
	}
}
