package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
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
