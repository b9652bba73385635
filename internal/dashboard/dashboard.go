// Package dashboard is the fleet's web dashboard: `fleetctl dashboard` on a
// user's machine, reading with their kubeconfig, and `fleet-manager
// dashboard --in-cluster`, which the manager chart runs and which authorises
// every caller as themselves (auth.go, session.go, limit.go). It serves the
// grid of Remotes × Modules and a page per Module, Remote and cell, rendered
// from a watch-fed cache (cache.go) with internal/fleetview, the read model
// fleetctl shows too, and streams each page's changes as server-sent events.
// Its templates, script and style are embedded (assets/).
package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
)

// assets holds the page templates and the files served under /static/.
//
//go:embed assets
var assets embed.FS

var pages = template.Must(template.ParseFS(assets, "assets/pages.html"))

// gridRows is how many Remotes a page of the grid shows unless ?rows=
// says otherwise.
const gridRows = 100

// options are the dashboard command's flags.
type options struct {
	address, certFile, keyFile string
	inCluster                  bool
	// exposeCredentials lets the local dashboard, which reads with the
	// caller's own credentials, listen beyond loopback.
	exposeCredentials bool
	// plainHTTP lets the in-cluster dashboard serve without TLS beyond
	// loopback.
	plainHTTP bool
	// trustForwardedFor names clients by X-Forwarded-For.
	trustForwardedFor   bool
	sessionIdle, maxAge time.Duration
}

// NewCommand returns the dashboard command, which connects to the
// management cluster that kube's flags (kubectl's kubeconfig, context and
// namespace flags, registered by the caller) select. fleetctl and
// fleet-manager both serve it as their dashboard subcommand.
func NewCommand(kube genericclioptions.RESTClientGetter) *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the fleet's web dashboard on this machine, reading with your own kubeconfig",
		Long: `Serves the namespace's fleet grid (filter by Remote labels and state), a page per Module
(rollout by stage, each cluster's state, history, events), per Remote (every sync with the cluster's message and the
dependency graph) and per cell (fleetctl why), updated live from watches. Every read is made
with your kubeconfig, so the dashboard shows exactly what you may read; nothing is installed in
the cluster, and the pages fetch nothing from elsewhere. It listens on loopback only: anyone who
reached it would read the fleet as you.

With --in-cluster (how the fleet-manager chart runs it) the dashboard serves every namespace
under /namespaces/NAME/ to callers who present a Kubernetes bearer token (an Authorization
header, or the login form): each request is authenticated with a TokenReview and authorised
with SubjectAccessReviews — the caller must be allowed to list and watch the namespace's
Modules, Remotes and ProxyAssemblages — never with the dashboard's own rights. The login form
opens a short session whose random identifier is the only thing the browser keeps; the token
stays in the dashboard's memory. TokenReviews are rate-limited per client address.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (o.certFile == "") != (o.keyFile == "") {
				return errors.New("--tls-cert-file and --tls-key-file go together")
			}
			if o.sessionIdle <= 0 || o.maxAge <= 0 {
				return errors.New("--session-idle-timeout and --session-max-age must be positive")
			}
			ln, err := net.Listen("tcp", o.address)
			if err != nil {
				return err
			}
			if err := o.mayListenOn(ln.Addr()); err != nil {
				_ = ln.Close()
				return err
			}
			d, err := newServer(cmd.Context(), kube, o)
			if err != nil {
				_ = ln.Close()
				return err
			}
			scheme := "http"
			if o.certFile != "" {
				scheme = "https"
			}
			if o.inCluster {
				fmt.Fprintf(cmd.OutOrStdout(), "serving every namespace's fleet on %s://%s/ to callers with a bearer token\n", scheme, ln.Addr())
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "serving namespace %s's fleet on %s://%s/ (Ctrl-C stops)\n", d.namespace, scheme, ln.Addr())
			}
			srv := &http.Server{Handler: d.handler(ln.Addr()), ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-cmd.Context().Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			}()
			if o.certFile != "" {
				err = srv.ServeTLS(ln, o.certFile, o.keyFile)
			} else {
				err = srv.Serve(ln)
			}
			if !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.address, "address", "localhost:8000", "Address to serve on: loopback only, unless --in-cluster, for the dashboard reads with your credentials")
	f.BoolVar(&o.inCluster, "in-cluster", false, "Serve every namespace to callers with a Kubernetes bearer token, authorised per request with SubjectAccessReview")
	f.StringVar(&o.certFile, "tls-cert-file", "", "PEM certificate to serve HTTPS with (with --tls-key-file)")
	f.StringVar(&o.keyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	f.BoolVar(&o.exposeCredentials, "insecure-expose-my-credentials", false,
		"Without --in-cluster, let --address be beyond loopback: ANYONE who reaches it reads the fleet with YOUR credentials")
	f.BoolVar(&o.plainHTTP, "insecure-plain-http", false,
		"With --in-cluster, serve without TLS beyond loopback: bearer tokens and session cookies then cross the network in the clear")
	f.BoolVar(&o.trustForwardedFor, "trust-forwarded-for", false,
		"With --in-cluster, rate-limit TokenReviews by the last X-Forwarded-For address: only behind a proxy that sets it, for a client can forge it")
	f.DurationVar(&o.sessionIdle, "session-idle-timeout", defaultSessionIdle, "With --in-cluster, how long a login session lasts unused")
	f.DurationVar(&o.maxAge, "session-max-age", defaultSessionMaxAge, "With --in-cluster, how long a login session lasts at most")
	return cmd
}

// mayListenOn refuses an address beyond loopback unless what is served
// there is safe to serve to anyone who reaches it, or the caller said they
// accept the risk.
func (o *options) mayListenOn(addr net.Addr) error {
	if ip := addr.(*net.TCPAddr).IP; ip.IsLoopback() {
		return nil
	}
	switch {
	case !o.inCluster && !o.exposeCredentials:
		return fmt.Errorf("--address %s is beyond loopback: the dashboard reads the fleet with your credentials and would show it to anyone who reaches it; "+
			"use a loopback address, --in-cluster (every caller authenticates), or --insecure-expose-my-credentials to accept the risk", o.address)
	case o.inCluster && o.certFile == "" && !o.plainHTTP:
		return fmt.Errorf("--address %s is beyond loopback without TLS: bearer tokens would cross the network in the clear; "+
			"give --tls-cert-file and --tls-key-file, or --insecure-plain-http to accept the risk", o.address)
	}
	return nil
}

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
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(limited.retryAfter)))
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

// page is what every page template receives.
type page struct {
	Title, Namespace, Root string
}

// view is one page's live region: its body and, for the grid, the parts
// (the pager, the header and each row) that live updates replace one by
// one.
type view struct {
	Title string
	Body  template.HTML
	Parts []part
}

type part struct {
	ID   string        `json:"id,omitempty"`
	HTML template.HTML `json:"html"`
}

func (v view) hash() string {
	sum := sha256.Sum256([]byte(v.Body))
	return hex.EncodeToString(sum[:8])
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

// gridFilter is the grid page's filter form.
type gridFilter struct {
	Selector, State string
	States          []string
}

func filterOf(path string, q url.Values) *gridFilter {
	if path != "/" {
		return nil
	}
	return &gridFilter{q.Get("selector"), q.Get("state"),
		[]string{fleetview.StateReady, fleetview.StatePending, fleetview.StateProgressing, fleetview.StateBlocked, fleetview.StateFailed, fleetview.StateOffline}}
}

// view renders the live region of the page at path, relative to the
// namespace's root.
func (d *server) view(ctx context.Context, ns, path string, q url.Values) (view, int) {
	f, err := d.cache.fleet(ctx, ns)
	if err != nil {
		return errorView("fleet", err.Error()), http.StatusOK
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case path == "/":
		return d.gridView(f, q), http.StatusOK
	case len(parts) == 2 && parts[0] == "modules":
		return d.moduleView(ctx, f, parts[1])
	case len(parts) == 2 && parts[0] == "remotes":
		return remoteView(f, parts[1])
	case len(parts) == 3 && parts[0] == "cells":
		return d.cellView(ctx, f, parts[1], parts[2])
	}
	return errorView("not found", "no page "+path), http.StatusNotFound
}

func errorView(title, message string) view {
	return view{Title: title, Body: execute("error", message)}
}

func notFound(title, format string, args ...any) (view, int) {
	return errorView(title, fmt.Sprintf(format, args...)), http.StatusNotFound
}

type gridRow struct {
	Name   string
	Cells  []gridCell
	remote *fleeetv1.Remote
}

type gridCell struct {
	fleetview.Cell
	Module, Remote, Text string
}

// gridView is the fleet grid, filtered by ?selector= (Remote labels) and
// ?state=, a page of ?rows= Remotes (?page=, from 1) at a time.
func (d *server) gridView(f *fleetview.Fleet, q url.Values) view {
	sel, err := labels.Parse(q.Get("selector"))
	if err != nil {
		return errorView("fleet", "selector: "+err.Error())
	}
	state := q.Get("state")
	rows, pageNo := gridRows, 1
	if n, err := strconv.Atoi(q.Get("rows")); err == nil && n > 0 {
		rows = min(n, 1000)
	}
	if n, err := strconv.Atoi(q.Get("page")); err == nil && n > 0 {
		pageNo = n
	}
	// Without a state to filter by, only the page's own cells are worked out.
	var matching []gridRow
	for i := range f.Remotes {
		if sel.Matches(labels.Set(f.Remotes[i].Labels)) {
			matching = append(matching, gridRow{Name: f.Remotes[i].Name, remote: &f.Remotes[i]})
		}
	}
	fill := func(row *gridRow) {
		for j := range f.Modules {
			c := f.Cell(&f.Modules[j], row.remote)
			row.Cells = append(row.Cells, gridCell{Cell: c, Module: f.Modules[j].Name, Remote: row.Name, Text: c.Text()})
		}
	}
	if state != "" {
		kept := matching[:0]
		for _, row := range matching {
			fill(&row)
			if slices.ContainsFunc(row.Cells, func(c gridCell) bool { return c.State == state }) {
				kept = append(kept, row)
			}
		}
		matching = kept
	}
	first := min((pageNo-1)*rows, len(matching))
	last := min(first+rows, len(matching))
	pager := struct {
		First, Last, Total int
		Prev, Next         string
	}{First: first + 1, Last: last, Total: len(matching)}
	at := func(n int) string {
		q := maps.Clone(q)
		q.Set("page", strconv.Itoa(n))
		return "?" + q.Encode()
	}
	if first > 0 {
		pager.Prev = at(pageNo - 1)
	}
	if last < len(matching) {
		pager.Next = at(pageNo + 1)
	}
	type module struct{ Name, Version string }
	var modules []module
	for i := range f.Modules {
		modules = append(modules, module{f.Modules[i].Name, compile.Version(&f.Modules[i].Spec.Sync)})
	}
	v := view{Title: "fleet", Parts: []part{{ID: "pager", HTML: execute("pager", pager)}, {ID: "head", HTML: execute("grid-head", modules)}}}
	for _, row := range matching[first:last] {
		if row.Cells == nil {
			fill(&row)
		}
		v.Parts = append(v.Parts, part{ID: "r-" + row.Name, HTML: execute("grid-row", row)})
	}
	var body bytes.Buffer
	body.WriteString(string(v.Parts[0].HTML) + `<table id="grid">`)
	for _, p := range v.Parts[1:] {
		body.WriteString(string(p.HTML))
	}
	body.WriteString("</table>")
	v.Body = template.HTML(body.String()) // #nosec G203 -- joined from templates that escaped their data
	return v
}

func (d *server) moduleView(ctx context.Context, f *fleetview.Fleet, name string) (view, int) {
	i := slices.IndexFunc(f.Modules, func(m fleeetv1.Module) bool { return m.Name == name })
	if i < 0 {
		return notFound("Module "+name, "no Module %s in namespace %s", name, f.Namespace)
	}
	m := &f.Modules[i]
	type cluster struct{ Remote, State, Text, Message string }
	body := struct {
		Name                string
		Rollout             fleetview.RolloutView
		Clusters            []cluster
		History             []fleeetv1.RolloutRecord
		Events              []string
		Denial, EventsError string
	}{Name: name, Rollout: f.Rollout(m), History: m.Status.History}
	for j := range f.Remotes {
		if c := f.Cell(m, &f.Remotes[j]); c.State != "" {
			body.Clusters = append(body.Clusters, cluster{f.Remotes[j].Name, c.State, c.Text(), c.Message})
		}
	}
	events := &corev1.EventList{}
	if err := d.eventReader(ctx).List(ctx, events, client.InNamespace(m.Namespace), client.MatchingFieldsSelector{Selector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.kind", "Module"), fields.OneTermEqualSelector("involvedObject.name", m.Name))}); err != nil {
		body.EventsError = "reading the Module's events: " + err.Error()
	}
	slices.SortFunc(events.Items, func(a, b corev1.Event) int { return fleetview.EventTime(&b).Compare(fleetview.EventTime(&a)) })
	for j := range events.Items {
		e := &events.Items[j]
		if len(body.Events) < 20 {
			body.Events = append(body.Events, e.Type+" "+fleetview.DescribeEvent(e))
		}
		if body.Denial == "" && e.Reason == fleeetv1.ReasonPolicyDenied {
			body.Denial = fleetview.DescribeEvent(e)
		}
	}
	return view{Title: "Module " + name, Body: execute("module", body)}, http.StatusOK
}

func remoteView(f *fleetview.Fleet, name string) (view, int) {
	i := slices.IndexFunc(f.Remotes, func(r fleeetv1.Remote) bool { return r.Name == name })
	if i < 0 {
		return notFound("Remote "+name, "no Remote %s in namespace %s", name, f.Namespace)
	}
	r := &f.Remotes[i]
	type sync struct {
		fleetview.Cell
		Module, Text, WaitsFor string
	}
	body := struct {
		Name, Connection, Heartbeat, Agent, Flux, FluxProblem string
		Syncs                                                 []sync
		Graph                                                 template.HTML
	}{Name: name, Connection: fleetview.ConditionMessage(r.Status.Conditions, fleeetv1.ConnectedCondition), Flux: r.Status.Flux.String()}
	if r.Status.AgentVersion != "" {
		body.Agent = r.Status.AgentVersion + " on Kubernetes " + r.Status.KubernetesVersion
	}
	if c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.FluxCompatibleCondition); c != nil && c.Status == metav1.ConditionFalse {
		body.FluxProblem = c.Reason + ": " + c.Message
	}
	if hb := r.Status.LastHeartbeatTime; hb != nil {
		body.Heartbeat = hb.UTC().Format(time.RFC3339)
	}
	cells := map[string]fleetview.Cell{}
	for j := range f.Modules {
		if c := f.Cell(&f.Modules[j], r); c.State != "" {
			body.Syncs = append(body.Syncs, sync{Cell: c, Module: f.Modules[j].Name, Text: c.Text(), WaitsFor: strings.Join(c.BlockedBy, ", ")})
			cells[f.Modules[j].Name] = c
		}
	}
	if plan := f.Plan(name); plan != nil {
		body.Graph = dependencyGraph(plan.Syncs(), cells)
	}
	return view{Title: "Remote " + name, Body: execute("remote", body)}, http.StatusOK
}

// cellView is fleetctl why's explanation, from the same code.
func (d *server) cellView(ctx context.Context, f *fleetview.Fleet, module, remote string) (view, int) {
	title := module + " on " + remote
	i := slices.IndexFunc(f.Modules, func(m fleeetv1.Module) bool { return m.Name == module })
	j := slices.IndexFunc(f.Remotes, func(r fleeetv1.Remote) bool { return r.Name == remote })
	if i < 0 || j < 0 {
		return notFound(title, "no Module %s or no Remote %s in namespace %s", module, remote, f.Namespace)
	}
	why := f.Why(&f.Modules[i], &f.Remotes[j])
	var err error
	if why.Warning, why.PolicyDenial, err = fleetview.LastWarnings(ctx, d.eventReader(ctx), &f.Modules[i], remote); err != nil {
		return errorView(title, err.Error()), http.StatusOK
	}
	var out bytes.Buffer
	why.Print(&out, f.Namespace)
	return view{Title: title, Body: execute("cell", out.String())}, http.StatusOK
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

// changes returns the parts of now that differ from shown, or the whole
// body when the parts themselves differ (rows came or went).
func changes(shown, now view) []part {
	if shown.Body == now.Body {
		return nil
	}
	same := len(shown.Parts) == len(now.Parts) && len(now.Parts) > 0
	for i := 0; same && i < len(now.Parts); i++ {
		same = shown.Parts[i].ID == now.Parts[i].ID
	}
	if !same {
		return []part{{HTML: now.Body}}
	}
	var out []part
	for i, p := range now.Parts {
		if p.HTML != shown.Parts[i].HTML {
			out = append(out, p)
		}
	}
	return out
}

// execute renders a template that escapes what it is given.
func execute(name string, data any) template.HTML {
	var out bytes.Buffer
	if err := pages.ExecuteTemplate(&out, name, data); err != nil {
		return template.HTML(template.HTMLEscapeString(err.Error())) // #nosec G203 -- escaped
	}
	return template.HTML(out.String()) // #nosec G203 -- the template escaped its data
}

func render(w http.ResponseWriter, status int, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(execute(name, data)))
}
