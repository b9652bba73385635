package fleetctl

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
)

// tokenCookie carries a bearer token a browser logged in with.
const tokenCookie = "fleeet-dashboard-token"

// reviewTTL is how long a TokenReview's or SubjectAccessReview's answer is
// reused: a revoked token or right stops working within it.
const reviewTTL = 10 * time.Second

// denied is the apiserver's answer that a caller is not who they say or
// may not do what they ask; other errors are failures to get an answer.
type denied struct{ reason string }

func (d denied) Error() string { return d.reason }

// errUnauthenticated answers a request without a valid bearer token.
var errUnauthenticated = denied{"log in with a Kubernetes bearer token"}

// reviewer authenticates the in-cluster dashboard's callers with
// TokenReview and authorises them with SubjectAccessReview: the dashboard
// shows a namespace only to those who may list and watch its Modules,
// Remotes and plans themselves, whatever the dashboard's own rights.
type reviewer struct {
	c client.Client

	mu      sync.Mutex
	users   map[[32]byte]review[authenticationv1.UserInfo]
	answers map[string]review[string]
}

type review[T any] struct {
	value   T
	err     error
	expires time.Time
}

func newReviewer(c client.Client) *reviewer {
	return &reviewer{c: c, users: map[[32]byte]review[authenticationv1.UserInfo]{}, answers: map[string]review[string]{}}
}

// bearer is the request's token: its Authorization header, or the cookie
// the login form set.
func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		return strings.TrimSpace(strings.TrimPrefix(h, "Bearer "))
	}
	if c, err := r.Cookie(tokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// user authenticates the request's bearer token.
func (a *reviewer) user(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
	if token == "" {
		return authenticationv1.UserInfo{}, errUnauthenticated
	}
	key := sha256.Sum256([]byte(token))
	return cached(a, a.users, key, func() (authenticationv1.UserInfo, error) {
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
	_, err := cached(a, a.answers, key, func() (string, error) {
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
	user, err := a.user(ctx, bearer(r))
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

// cached returns the unexpired answer under key or computes, stores and
// returns a new one; a failure to get an answer is not stored. Expired
// answers are dropped as new ones are stored.
func cached[K comparable, T any](a *reviewer, m map[K]review[T], key K, compute func() (T, error)) (T, error) {
	now := time.Now()
	a.mu.Lock()
	r, ok := m[key]
	a.mu.Unlock()
	if ok && now.Before(r.expires) {
		return r.value, r.err
	}
	v, err := compute()
	if err != nil && !errors.As(err, new(denied)) {
		return v, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, old := range m {
		if now.After(old.expires) {
			delete(m, k)
		}
	}
	m[key] = review[T]{value: v, err: err, expires: now.Add(reviewTTL)}
	return v, err
}

// callerKey holds, in an in-cluster request's context, the caller the
// TokenReview named.
type callerKey struct{}

// eventReader reads events for the request in ctx: locally with the
// user's own credentials, in-cluster only in namespaces a
// SubjectAccessReview says the caller may list events in.
func (d *dashboardServer) eventReader(ctx context.Context) client.Reader {
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
