package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleeet-dev/fleeet/internal/fleetview"
	"github.com/fleeet-dev/fleeet/internal/ratelimit"
)

// server serves the fleet pages from a watch-fed cache.
type server struct {
	cache *fleetCache
	// events reads the Modules' events for their pages.
	events client.Reader
	// reviewer authorises callers in-cluster; nil when the dashboard reads
	// with the user's own credentials.
	reviewer *reviewer
	// namespace is the local dashboard's one namespace.
	namespace string
}

// newServer connects to the cluster kube selects: in-cluster to serve
// every namespace, else the one namespace kube selects.
func newServer(ctx context.Context, kube genericclioptions.RESTClientGetter, o options) (*server, error) {
	cfg, err := kube.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: fleetview.Scheme})
	if err != nil {
		return nil, err
	}
	d := &server{events: c}
	if o.inCluster {
		d.reviewer = newReviewer(c, newLoginSessions(o.sessionIdle, o.maxAge), o.trustForwardedFor)
	} else if d.namespace, _, err = kube.ToRawKubeConfigLoader().Namespace(); err != nil {
		return nil, err
	}
	d.cache, err = newFleetCache(ctx, cfg, d.namespace)
	return d, err
}

// handler routes the dashboard. Locally it serves its one namespace at /
// and only to requests addressed to the address it listens on, so a web
// page cannot reach it through a DNS name rebound to this machine.
// In-cluster it serves a login form at / and each namespace under
// /namespaces/NAME/, to callers the reviewer lets read it.
func (d *server) handler(addr net.Addr) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", staticFiles())
	if d.reviewer == nil {
		mux.Handle("/", d.namespaced(d.namespace))
		return secured(localOnly(addr, mux))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := d.cache.synced(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /{$}", d.index)
	mux.HandleFunc("POST /login", d.login)
	mux.HandleFunc("POST /logout", d.logout)
	mux.HandleFunc("/namespaces/{namespace}/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		ns := r.PathValue("namespace")
		user, err := d.reviewer.reader(r.Context(), r, ns)
		if err != nil {
			refuse(w, err)
			return
		}
		r = r.Clone(context.WithValue(r.Context(), callerKey{}, user))
		r.URL.Path = "/" + r.PathValue("rest")
		d.namespaced(ns).ServeHTTP(w, r)
	})
	return secured(mux)
}

// namespaced serves one namespace's pages, live events and assets.
func (d *server) namespaced(ns string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", staticFiles())
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) { d.live(w, r, ns) })
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) { d.page(w, r, ns) })
	return mux
}

func staticFiles() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err)
	}
	return http.StripPrefix("/static/", http.FileServerFS(sub))
}

// secured sets the headers that keep the pages from loading anything from
// elsewhere, running inline script or being framed.
func secured(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// localOnly refuses requests addressed to a host other than the one the
// local dashboard listens on (or localhost).
func localOnly(addr net.Addr, next http.Handler) http.Handler {
	host, _, _ := net.SplitHostPort(addr.String())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			h = r.Host
		}
		if h != host && h != "localhost" && !(net.ParseIP(host).IsUnspecified() && net.ParseIP(h) != nil) {
			http.Error(w, "the dashboard answers only requests addressed to "+addr.String(), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// secure reports whether the request came over HTTPS, here or at a proxy.
func secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// refuse answers an unauthenticated request with the login form, a
// forbidden one with what the caller may not do, and one whose client has
// used up its TokenReviews with when to try again.
func refuse(w http.ResponseWriter, err error) {
	var limited rateLimited
	if errors.As(err, &limited) {
		w.Header().Set("Retry-After", strconv.Itoa(ratelimit.RetrySeconds(limited.retryAfter)))
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	status := http.StatusForbidden
	if errors.Is(err, errUnauthenticated) || errors.Is(err, errSessionEnded) {
		status = http.StatusUnauthorized
		w.Header().Set("WWW-Authenticate", `Bearer realm="fleeet dashboard"`)
	}
	var d denied
	if !errors.As(err, &d) {
		status = http.StatusBadGateway
	}
	render(w, status, "index", indexPage{page: page{Title: "log in", Root: "/"}, Error: err.Error()})
}

type indexPage struct {
	page
	Error string
}

// index is the in-cluster dashboard's front page: the login form and a
// namespace to open.
func (d *server) index(w http.ResponseWriter, r *http.Request) {
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		http.Redirect(w, r, "namespaces/"+url.PathEscape(ns)+"/", http.StatusSeeOther)
		return
	}
	render(w, http.StatusOK, "index", indexPage{page: page{Title: "log in", Root: "./"}})
}

// login checks the posted token with a TokenReview, and its right to read
// the posted namespace with SubjectAccessReviews, then opens a session for
// it and shows that namespace: the browser keeps only the session's random
// identifier, in an HTTP-only, same-site cookie that is Secure over HTTPS.
// A token that may read nothing the dashboard shows gets no session.
func (d *server) login(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		http.Error(w, "cross-site login refused", http.StatusForbidden)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	ns := strings.TrimSpace(r.PostFormValue("namespace"))
	user, err := d.reviewer.user(r.Context(), r, token)
	if err == nil && ns == "" {
		err = denied{"name the namespace to open"}
	}
	if err == nil {
		err = d.reviewer.mayReadFleet(r.Context(), user, ns)
	}
	if err != nil {
		refuse(w, err)
		return
	}
	sessions := d.reviewer.sessions
	id, err := sessions.start(token, user.Username, d.reviewer.now())
	if err != nil {
		render(w, http.StatusServiceUnavailable, "index", indexPage{page: page{Title: "log in", Root: "/"}, Error: err.Error()})
		return
	}
	http.SetCookie(w, sessionCookieOf(r, id, int(sessions.maxAge.Seconds())))
	http.Redirect(w, r, "namespaces/"+url.PathEscape(ns)+"/", http.StatusSeeOther)
}

// logout ends the request's session and has the browser drop its cookie.
func (d *server) logout(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		http.Error(w, "cross-site logout refused", http.StatusForbidden)
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		d.reviewer.sessions.end(c.Value)
	}
	http.SetCookie(w, sessionCookieOf(r, "", -1))
	http.Redirect(w, r, "./", http.StatusSeeOther)
}

func sessionCookieOf(r *http.Request, id string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: sessionCookie, Value: id, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteStrictMode}
}

// page serves a whole page: the fleet grid at /, a Module's, a Remote's
// or a cell's page.
func (d *server) page(w http.ResponseWriter, r *http.Request, ns string) {
	v, status := d.view(r.Context(), ns, r.URL.Path, r.URL.Query())
	depth := strings.Count(strings.TrimPrefix(r.URL.Path, "/"), "/")
	src := strings.TrimPrefix(r.URL.Path, "/")
	if r.URL.RawQuery != "" {
		src += "?" + r.URL.RawQuery
	}
	render(w, status, "page", struct {
		page
		Src, Shown string
		Body       template.HTML
		Filter     *gridFilter
	}{page{Title: v.Title, Namespace: ns, Root: "./" + strings.Repeat("../", depth)}, src, v.hash(), v.Body, filterOf(r.URL.Path, r.URL.Query())})
}

// live streams the page's updates as server-sent events, from the cache's
// watches: each event carries the parts of the page that changed (or its
// whole body), as JSON. ?src= names the page, ?shown= the hash of the body
// it shows. Changes within 100 ms make one event. In-cluster the caller's
// rights are checked again before every event.
func (d *server) live(w http.ResponseWriter, r *http.Request, ns string) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	src, err := url.Parse(r.URL.Query().Get("src"))
	if err != nil {
		http.Error(w, "src: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	if err := d.cache.synced(ctx); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	changed, stop := d.cache.subscribe(ns)
	defer stop()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fmt.Fprint(w, ": watching\n\n")
	flusher.Flush()
	shown, _ := d.view(ctx, ns, "/"+src.Path, src.Query())
	if shown.hash() != r.URL.Query().Get("shown") {
		shown = view{} // the page is behind already
	}
	recheck := time.NewTicker(reviewTTL)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-recheck.C:
		case <-changed:
			time.Sleep(100 * time.Millisecond)
		}
		if d.reviewer != nil {
			if _, err := d.reviewer.reader(ctx, r, ns); err != nil {
				return
			}
		}
		now, _ := d.view(ctx, ns, "/"+src.Path, src.Query())
		if update := changes(shown, now); len(update) > 0 {
			data, _ := json.Marshal(map[string][]part{"parts": update})
			fmt.Fprintf(w, "data: %s\n\n", data)
			flusher.Flush()
		}
		shown = now
	}
}
