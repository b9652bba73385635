package dashboard

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/ratelimit"
)

// reviewTTL is how long a TokenReview's or SubjectAccessReview's answer is
// reused: a revoked token or right stops working within it.
const reviewTTL = 10 * time.Second

// maxCachedReviews bounds each cache of review answers; when full, the
// answer closest to expiry goes first.
const maxCachedReviews = 4096

// denied is the apiserver's answer that a caller is not who they say or
// may not do what they ask; other errors are failures to get an answer.
type denied struct{ reason string }

func (d denied) Error() string { return d.reason }

// errUnauthenticated answers a request without a valid bearer token.
var errUnauthenticated = denied{"log in with a Kubernetes bearer token"}

// errSessionEnded answers a session cookie the dashboard no longer knows:
// logged out, expired, or never issued.
var errSessionEnded = denied{"your session has ended: log in again"}

// reviewer authenticates the in-cluster dashboard's callers with
// TokenReview and authorises them with SubjectAccessReview: the dashboard
// shows a namespace only to those who may list and watch its Modules,
// Remotes and plans themselves, whatever the dashboard's own rights.
type reviewer struct {
	c client.Client
	// limits bounds the TokenReviews each client can cause.
	limits *ratelimit.Shared
	// sessions holds the tokens browsers logged in with.
	sessions *loginSessions
	// trustForwardedFor names clients by X-Forwarded-For (see clientOf).
	trustForwardedFor bool
	// now is the clock, replaced in tests.
	now func() time.Time

	// users is keyed by the SHA-256 of the token: the raw token is never
	// kept as a key.
	users   *reviewCache[[32]byte, authenticationv1.UserInfo]
	answers *reviewCache[string, string]
}

func newReviewer(c client.Client, sessions *loginSessions, trustForwardedFor bool) *reviewer {
	return &reviewer{
		c: c, limits: newReviewLimits(), sessions: sessions, trustForwardedFor: trustForwardedFor, now: time.Now,
		users:   newReviewCache[[32]byte, authenticationv1.UserInfo](maxCachedReviews),
		answers: newReviewCache[string, string](maxCachedReviews),
	}
}

// bearer is the request's token: its Authorization header, or the token
// of the login session its cookie names.
func (a *reviewer) bearer(r *http.Request) (string, error) {
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		return strings.TrimSpace(strings.TrimPrefix(h, "Bearer ")), nil
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", errUnauthenticated
	}
	token, ok := a.sessions.token(c.Value, a.now())
	if !ok {
		return "", errSessionEnded
	}
	return token, nil
}

// user authenticates token, presented by the client of r. A token without
// a fresh answer costs a TokenReview, which the client's and everyone's
// allowance must cover.
func (a *reviewer) user(ctx context.Context, r *http.Request, token string) (authenticationv1.UserInfo, error) {
	if token == "" {
		return authenticationv1.UserInfo{}, errUnauthenticated
	}
	key := sha256.Sum256([]byte(token))
	return a.users.get(key, a.now(), func() (authenticationv1.UserInfo, error) {
		if wait := a.limits.Allow(clientOf(r, a.trustForwardedFor), a.now()); wait > 0 {
			return authenticationv1.UserInfo{}, rateLimited{wait}
		}
		tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
		if err := a.c.Create(ctx, tr); err != nil {
			return authenticationv1.UserInfo{}, fmt.Errorf("reviewing the token: %w", err)
		}
		if !tr.Status.Authenticated {
			// The apiserver's reason may quote the token; it is not repeated.
			return authenticationv1.UserInfo{}, errUnauthenticated
		}
		return tr.Status.User, nil
	})
}

// may returns nil when user may verb resource in namespace, or an error
// that says what is missing.
func (a *reviewer) may(ctx context.Context, user authenticationv1.UserInfo, verb, group, resource, namespace string) error {
	key := strings.Join([]string{user.Username, user.UID, strings.Join(user.Groups, ","), fmt.Sprint(user.Extra), verb, group, resource, namespace}, "\x00")
	_, err := a.answers.get(key, a.now(), func() (string, error) {
		extra := map[string]authorizationv1.ExtraValue{}
		for k, v := range user.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group, Resource: resource},
		}}
		if err := a.c.Create(ctx, sar); err != nil {
			return "", fmt.Errorf("reviewing access: %w", err)
		}
		if !sar.Status.Allowed || sar.Status.Denied {
			return "", denied{fmt.Sprintf("forbidden: %s may not %s %s in namespace %s", user.Username, verb, resource, namespace)}
		}
		return "", nil
	})
	return err
}

// reader authenticates the request's caller and authorises them to read
// namespace's fleet.
func (a *reviewer) reader(ctx context.Context, r *http.Request, namespace string) (authenticationv1.UserInfo, error) {
	token, err := a.bearer(r)
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	user, err := a.user(ctx, r, token)
	if err == nil {
		err = a.mayReadFleet(ctx, user, namespace)
	}
	return user, err
}

// mayReadFleet returns nil when user may list and watch namespace's
// Modules, Remotes and ProxyAssemblages.
func (a *reviewer) mayReadFleet(ctx context.Context, user authenticationv1.UserInfo, namespace string) error {
	for _, resource := range []string{"modules", "remotes", "proxyassemblages"} {
		for _, verb := range []string{"list", "watch"} {
			if err := a.may(ctx, user, verb, fleeetv1.GroupVersion.Group, resource, namespace); err != nil {
				return err
			}
		}
	}
	return nil
}

type review[T any] struct {
	value   T
	err     error
	expires time.Time
}

// reviewCache keeps review answers for reviewTTL, at most max of them.
type reviewCache[K comparable, T any] struct {
	max int

	mu      sync.Mutex
	entries map[K]review[T]
}

func newReviewCache[K comparable, T any](max int) *reviewCache[K, T] {
	return &reviewCache[K, T]{max: max, entries: map[K]review[T]{}}
}

// get returns the unexpired answer under key or computes, stores and
// returns a new one. Only the apiserver's answers are stored: a failure
// to get one, or a refusal to ask (rateLimited), is not.
func (c *reviewCache[K, T]) get(key K, now time.Time, compute func() (T, error)) (T, error) {
	c.mu.Lock()
	r, ok := c.entries[key]
	c.mu.Unlock()
	if ok && now.Before(r.expires) {
		return r.value, r.err
	}
	v, err := compute()
	if err != nil && !errors.As(err, new(denied)) {
		return v, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		for k, old := range c.entries {
			if !now.Before(old.expires) {
				delete(c.entries, k)
			}
		}
	}
	for len(c.entries) >= c.max {
		var first K
		var at *review[T]
		for k, old := range c.entries {
			if at == nil || old.expires.Before(at.expires) {
				first, at = k, &old
			}
		}
		delete(c.entries, first)
	}
	c.entries[key] = review[T]{value: v, err: err, expires: now.Add(reviewTTL)}
	return v, err
}

// len is the number of answers kept.
func (c *reviewCache[K, T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// callerKey holds, in an in-cluster request's context, the caller the
// TokenReview named.
type callerKey struct{}

// eventReader reads events for the request in ctx: locally with the
// user's own credentials, in-cluster only in namespaces a
// SubjectAccessReview says the caller may list events in.
func (d *server) eventReader(ctx context.Context) client.Reader {
	if d.reviewer == nil {
		return d.events
	}
	user, _ := ctx.Value(callerKey{}).(authenticationv1.UserInfo)
	return callerReader{Reader: d.events, may: func(namespace string) error {
		return d.reviewer.may(ctx, user, "list", "", "events", namespace)
	}}
}

// callerReader lists with the dashboard's client what the caller may list.
type callerReader struct {
	client.Reader
	may func(namespace string) error
}

func (c callerReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	if err := c.may(o.Namespace); err != nil {
		return err
	}
	return c.Reader.List(ctx, list, opts...)
}

func (c callerReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.may(key.Namespace); err != nil {
		return err
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}
