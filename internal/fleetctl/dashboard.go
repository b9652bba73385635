package fleetctl

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

//go:embed dashboard
var dashboardFiles embed.FS

var pages = template.Must(template.ParseFS(dashboardFiles, "dashboard/pages.html"))

func newDashboardCommand(s *session) *cobra.Command {
	var address string
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the fleet's web dashboard on this machine, reading with your own kubeconfig",
		Long: `Serves the namespace's fleet grid (filter by Remote labels and state), a page per Module
(rollout by stage, history), per Remote (every sync with the cluster's message) and per cell
(fleetctl why), updated live from watches. Every read is made with your kubeconfig, so the
dashboard shows exactly what you may read; nothing is installed in the cluster, and the pages
fetch nothing from elsewhere.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", address)
			if err != nil {
				return err
			}
			ns, err := s.namespace()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "serving namespace %s's fleet on http://%s/ (Ctrl-C stops)\n", ns, ln.Addr())
			srv := &http.Server{Handler: dashboard(s), ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-cmd.Context().Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			}()
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&address, "address", "localhost:8000", "Address to serve on; keep it on localhost: it reads with your credentials")
	return cmd
}

// dashboard routes the dashboard's pages, fragments, live events and
// assets.
func dashboard(s *session) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(mustSub(dashboardFiles, "dashboard"))))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { s.fleetPage(w, r, "fleet") })
	mux.HandleFunc("GET /grid", func(w http.ResponseWriter, r *http.Request) { s.fleetPage(w, r, "grid") })
	mux.HandleFunc("GET /events", s.events)
	for _, page := range []string{"modules/{module}", "remotes/{remote}", "cells/{module}/{remote}"} {
		mux.HandleFunc("GET /"+page, s.detailPage)
		mux.HandleFunc("GET /fragments/"+page, s.detailPage)
	}
	return mux
}

// page is what every page template receives.
type page struct {
	Title, Namespace, Root, Fragment string
	Body                             any
}

// gridView is the fleet grid as the dashboard draws it.
type gridView struct {
	Error   string
	Modules []struct{ Name, Version string }
	Rows    []gridRow
}

type gridRow struct {
	Name  string
	Cells []gridCell
}

type gridCell struct {
	Cell
	Module, Remote, Text string
}

// fleetPage serves the grid, as a page or as the fragment live updates
// swap in, filtered by ?selector= (Remote labels) and ?state=.
func (s *session) fleetPage(w http.ResponseWriter, r *http.Request, name string) {
	selector, state := r.URL.Query().Get("selector"), r.URL.Query().Get("state")
	grid := s.grid(r.Context(), selector, state)
	if name == "grid" {
		render(w, "grid", grid)
		return
	}
	ns, _ := s.namespace()
	q := url.Values{}
	q.Set("selector", selector)
	q.Set("state", state)
	render(w, "fleet", struct {
		page
		Selector, State, Query string
		States                 []string
		Grid                   gridView
	}{page{Title: "fleet", Namespace: ns, Root: "./"}, selector, state, q.Encode(),
		[]string{StateReady, StatePending, StateProgressing, StateBlocked, StateFailed, StateOffline}, grid})
}

func (s *session) grid(ctx context.Context, selector, state string) gridView {
	_, f, err := s.fleet(ctx)
	if err != nil {
		return gridView{Error: err.Error()}
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return gridView{Error: "selector: " + err.Error()}
	}
	var v gridView
	view := f.statusView()
	for _, m := range f.Modules {
		v.Modules = append(v.Modules, struct{ Name, Version string }{m.Name, view.Modules[m.Name]})
	}
	for i, rv := range view.Remotes {
		if !sel.Matches(labels.Set(f.Remotes[i].Labels)) {
			continue
		}
		row := gridRow{Name: rv.Name}
		keep := state == ""
		for _, m := range f.Modules {
			c := rv.Cells[m.Name]
			row.Cells = append(row.Cells, gridCell{Cell: c, Module: m.Name, Remote: rv.Name, Text: c.Text()})
			keep = keep || c.State == state
		}
		if keep {
			v.Rows = append(v.Rows, row)
		}
	}
	return v
}

// detailPage serves a Module's, a Remote's or a cell's page, or, under
// /fragments/, its body for live updates.
func (s *session) detailPage(w http.ResponseWriter, r *http.Request) {
	module, remote := r.PathValue("module"), r.PathValue("remote")
	fragment := strings.HasPrefix(r.URL.Path, "/fragments/")
	var name, title string
	var body any
	switch {
	case module != "" && remote != "":
		name, title, body = "cell", module+" on "+remote, s.cellBody(r.Context(), module, remote)
	case module != "":
		name, title, body = "module", "Module "+module, s.moduleBody(r.Context(), module)
	default:
		name, title, body = "remote", "Remote "+remote, s.remoteBody(r.Context(), remote)
	}
	if fragment {
		render(w, name+"-body", body)
		return
	}
	ns, _ := s.namespace()
	root := strings.Repeat("../", strings.Count(strings.TrimPrefix(r.URL.Path, "/"), "/"))
	render(w, name, page{Title: title, Namespace: ns, Root: root, Fragment: root + "fragments" + r.URL.Path, Body: body})
}

func (s *session) moduleBody(ctx context.Context, name string) any {
	type body struct {
		Error   string
		Rollout RolloutView
		History []fleeetv1.RolloutRecord
	}
	_, f, err := s.fleet(ctx)
	if err != nil {
		return body{Error: err.Error()}
	}
	i := slices.IndexFunc(f.Modules, func(m fleeetv1.Module) bool { return m.Name == name })
	if i < 0 {
		return body{Error: fmt.Sprintf("no Module %s in namespace %s", name, f.Namespace)}
	}
	return body{Rollout: f.rolloutView(&f.Modules[i]), History: f.Modules[i].Status.History}
}

func (s *session) remoteBody(ctx context.Context, name string) any {
	type sync struct {
		Cell
		Module, Text string
	}
	type body struct {
		Error, Name, Connection string
		Syncs                   []sync
	}
	_, f, err := s.fleet(ctx)
	if err != nil {
		return body{Error: err.Error()}
	}
	i := slices.IndexFunc(f.Remotes, func(r fleeetv1.Remote) bool { return r.Name == name })
	if i < 0 {
		return body{Error: fmt.Sprintf("no Remote %s in namespace %s", name, f.Namespace)}
	}
	b := body{Name: name, Connection: "Connected " + conditionMessage(f.Remotes[i].Status.Conditions, fleeetv1.ConnectedCondition)}
	for j := range f.Modules {
		if c := f.Cell(&f.Modules[j], &f.Remotes[i]); c.State != "" {
			b.Syncs = append(b.Syncs, sync{Cell: c, Module: f.Modules[j].Name, Text: c.Text()})
		}
	}
	return b
}

// cellBody is fleetctl why's explanation, from the same code.
func (s *session) cellBody(ctx context.Context, module, remote string) any {
	type body struct{ Error, Why string }
	c, f, err := s.fleet(ctx)
	if err != nil {
		return body{Error: err.Error()}
	}
	i := slices.IndexFunc(f.Modules, func(m fleeetv1.Module) bool { return m.Name == module })
	j := slices.IndexFunc(f.Remotes, func(r fleeetv1.Remote) bool { return r.Name == remote })
	if i < 0 || j < 0 {
		return body{Error: fmt.Sprintf("no Module %s or no Remote %s in namespace %s", module, remote, f.Namespace)}
	}
	view := f.why(&f.Modules[i], &f.Remotes[j])
	if view.Warning, view.PolicyDenial, err = lastWarnings(ctx, c, &f.Modules[i], remote); err != nil {
		return body{Error: err.Error()}
	}
	var out bytes.Buffer
	view.print(&out, f.Namespace)
	return body{Why: out.String()}
}

// events streams a server-sent event whenever a Module, Remote or plan of
// the namespace changes, from watches made with the user's credentials;
// changes within 200 ms make one event.
func (s *session) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	cfg, err := s.kube.ToRESTConfig()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	ns, err := s.namespace()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	changed := make(chan struct{}, 1)
	for _, list := range []client.ObjectList{&fleeetv1.ModuleList{}, &fleeetv1.RemoteList{}, &fleeetv1.ProxyAssemblageList{}} {
		// Listed first, watched from there: only changes are events.
		if err := wc.List(r.Context(), list, client.InNamespace(ns)); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		watcher, err := wc.Watch(r.Context(), list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		defer watcher.Stop()
		go func() {
			for range watcher.ResultChan() {
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		}()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fmt.Fprint(w, ": watching\n\n")
	flusher.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-changed:
			time.Sleep(200 * time.Millisecond)
			select {
			case <-changed:
			default:
			}
			fmt.Fprint(w, "data: changed\n\n")
			flusher.Flush()
		}
	}
}

func render(w http.ResponseWriter, name string, data any) {
	var out bytes.Buffer
	if err := pages.ExecuteTemplate(&out, name, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(out.Bytes())
}

func mustSub(fsys embed.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err)
	}
	return sub
}
