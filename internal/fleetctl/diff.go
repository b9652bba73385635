package fleetctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/syncgraph"
)

// DiffView is what fleetctl diff shows: the change, admission's verdict on
// it, and what it does to each Remote's plan once rolled out.
type DiffView struct {
	// Change says what was previewed.
	Change string `json:"change"`
	// Admitted is admission's verdict on the changed object, from a
	// server-side dry run; Refusal says why not.
	Admitted bool   `json:"admitted"`
	Refusal  string `json:"refusal,omitempty"`
	// Selected and Deselected list the Remotes the change makes a Module
	// select or no longer select.
	Selected   []string `json:"selected,omitempty"`
	Deselected []string `json:"deselected,omitempty"`
	// Remotes lists, per Remote whose plan changes, what changes.
	Remotes []RemoteDiff `json:"remotes,omitempty"`
}

// RemoteDiff is the change to one Remote's plan.
type RemoteDiff struct {
	Remote  string     `json:"remote"`
	Added   []string   `json:"added,omitempty"`
	Removed []string   `json:"removed,omitempty"`
	Changed []SyncDiff `json:"changed,omitempty"`
	// Held lists the syncs that would wait for an added or changed sync
	// they depend on to be Ready at its new version.
	Held []string `json:"held,omitempty"`
	// Overrides lists, for each added or changed sync whose Module has
	// overrides, the overrides that pick this Remote, as "module: names".
	Overrides []string `json:"overrides,omitempty"`
	// LeftOut lists the Modules whose new sync the plan would leave out,
	// since with it the plan would pass --max-plan-bytes, and why: those
	// newly left out, and those left out again at a new generation.
	LeftOut []string `json:"leftOut,omitempty"`
}

// SyncDiff is one changed sync, field by field.
type SyncDiff struct {
	Sync   string   `json:"sync"`
	Fields []string `json:"fields"`
}

// differs reports whether the view holds any difference.
func (v *DiffView) differs() bool {
	return !v.Admitted || len(v.Remotes) > 0 || len(v.Selected) > 0 || len(v.Deselected) > 0
}

// exitError carries an exit status other than 1: fleetctl diff exits as
// kubectl diff, 1 for differences and 2 for an error.
type exitError struct {
	code int
	err  error // nil for differences
}

func (e *exitError) Error() string {
	if e.err == nil {
		return "differences found"
	}
	return e.err.Error()
}

// ExitCode returns the exit status for an error of NewCommand's Execute.
func ExitCode(err error) int {
	if e := (*exitError)(nil); errors.As(err, &e) {
		return e.code
	}
	return 1
}

func newDiffCommand(s *session) *cobra.Command {
	var file, deleteModule, remote, labels, output string
	var off offlineDiff
	maxPlanBytes := compile.DefaultMaxPlanBytes
	cmd := &cobra.Command{
		Use:   "diff (-f MODULE.yaml | --delete MODULE | --remote REMOTE --labels k=v,k2- | --offline [--base DIR] -f DIR)",
		Short: "Preview what a change to a Module, or to a Remote's labels, does to every cluster's plan",
		Long: `Computes, with the manager's own compiler and writing nothing, what a change does once rolled
out: the Remotes a Module comes to select or no longer selects, and for each Remote whose plan
changes the syncs added, removed and changed (field by field) and the syncs that would wait for a
changed dependency. The changed object goes through a server-side dry run, so defaults and the
admission policies' verdict are the apiserver's. A plan is split over up to 8 parts of at most
--max-plan-bytes and leaves out the Module changes that fit in none, as the manager does ("left
out:", naming the Remote, the limit and why, a new version of a Module left out already
included): give the manager's own --max-plan-bytes when it is not the default. Exit status as
kubectl diff: 0 no differences, 1 differences (a refused change included), 2 an error.

With --offline no cluster is read: -f names a checkout (a file or directory) of the fleet's
Modules, Remotes and the ConfigMaps control-plane bindings read, --base another (say the pull
request's base). Each checkout's plans are compiled by the manager's compiler, the head's from the
base's as the manager's from what each Remote holds (a change that fits in no part is the one
left out, in a "(plan)" note), and each sync is rendered as Flux would apply it on that cluster
(kustomize build with post-build substitution, helm template), its sources fetched at their
pinned versions; the output is a unified diff per cluster and sync. What only the cluster knows
(downstream bindings, substituteFrom, valuesFrom) is named in a comment and left unresolved.
Private sources: --credentials-file. A sync of -f that cannot be rendered exits 2.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			differs, err := func() (bool, error) {
				if off.on {
					return s.offlineDiff(cmd, &off, file, deleteModule+remote, output, maxPlanBytes)
				}
				c, ns, err := s.client()
				if err != nil {
					return false, err
				}
				var change func(ctx context.Context, p *preview) error
				switch {
				case file != "" && deleteModule == "" && remote == "":
					change = func(ctx context.Context, p *preview) error { return p.applyModuleFile(ctx, file) }
				case deleteModule != "" && file == "" && remote == "":
					change = func(ctx context.Context, p *preview) error { return p.deleteModule(ctx, deleteModule) }
				case remote != "" && file == "" && deleteModule == "":
					change = func(ctx context.Context, p *preview) error { return p.relabel(ctx, remote, labels) }
				default:
					return false, errors.New("give exactly one of -f, --delete or --remote")
				}
				p := &preview{c: c, ns: ns, maxPlanBytes: maxPlanBytes}
				view, err := p.run(cmd.Context(), change)
				if err != nil {
					return false, err
				}
				return view.differs(), show(cmd.OutOrStdout(), output, view)
			}()
			switch {
			case err != nil:
				return &exitError{code: 2, err: err}
			case differs:
				cmd.SilenceErrors = true
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "A Module manifest (YAML or JSON) to preview creating or updating; - reads stdin. With --offline: the checkout to render, a file or directory")
	cmd.Flags().StringVar(&deleteModule, "delete", "", "A Module whose deletion to preview")
	cmd.Flags().StringVar(&remote, "remote", "", "A Remote whose label change to preview, with --labels")
	cmd.Flags().StringVar(&labels, "labels", "", "Label changes for --remote, as kubectl label writes them: k=v sets, k- removes")
	cmd.Flags().IntVar(&maxPlanBytes, "max-plan-bytes", maxPlanBytes,
		"The manager's --max-plan-bytes, the limit of each part of a plan: the Modules that fit in no part are left out, newest first")
	addOfflineFlags(cmd, &off)
	addOutputFlag(cmd, &output)
	return cmd
}

// preview holds a namespace's fleet before and after one change.
type preview struct {
	c  client.Client
	ns string
	// maxPlanBytes is the manager's --max-plan-bytes.
	maxPlanBytes int

	view                   DiffView
	before, after          []fleeetv1.Module
	remotesBefore, remotes []fleeetv1.Remote
	plans                  map[string]fleeetv1.ProxyPlan
	// module is the Module the change is to, if any.
	module string
}

// run reads the namespace's fleet, applies change to a copy and compares
// every Remote's plan once rolled out, before and after.
func (p *preview) run(ctx context.Context, change func(context.Context, *preview) error) (*DiffView, error) {
	modules, remotes, pas := &fleeetv1.ModuleList{}, &fleeetv1.RemoteList{}, &fleeetv1.ProxyAssemblageList{}
	for _, list := range []client.ObjectList{modules, remotes, pas} {
		if err := p.c.List(ctx, list, client.InNamespace(p.ns)); err != nil {
			return nil, err
		}
	}
	p.before, p.remotesBefore = modules.Items, remotes.Items
	p.after, p.remotes = slices.Clone(modules.Items), slices.Clone(remotes.Items)
	p.plans = fleeetv1.GroupProxyPlans(pas.Items)
	if err := plancontent.ResolveAll(ctx, p.c, p.ns, p.plans); err != nil {
		return nil, err
	}
	p.view.Admitted = true
	if err := change(ctx, p); err != nil {
		return nil, err
	}
	if !p.view.Admitted {
		return &p.view, nil // a refused change changes nothing
	}
	for i := range p.remotes {
		after := &p.remotes[i]
		before := p.remoteBefore(after.Name)
		old, wasLeftOut, err := p.eventual(ctx, p.before, before)
		if err != nil {
			return nil, err
		}
		next, leftOut, err := p.eventual(ctx, p.after, after)
		if err != nil {
			return nil, err
		}
		p.selection(before, after)
		d := diffPlans(after.Name, old, next)
		for _, name := range slices.Sorted(maps.Keys(leftOut)) {
			// Newly left out, or left out again at a new generation (the
			// stamp differs): the manager warns of either.
			if wasLeftOut[name] != leftOut[name] {
				if d == nil {
					d = &RemoteDiff{Remote: after.Name}
				}
				d.LeftOut = append(d.LeftOut, name+": "+leftOut[name].TooLarge)
			}
		}
		if d != nil {
			d.Overrides = p.overrides(old, next, after)
			p.view.Remotes = append(p.view.Remotes, *d)
		}
	}
	return &p.view, nil
}

// overrides says, for each sync the change adds to or changes in a
// Remote's plan, which overrides of its Module pick the Remote.
func (p *preview) overrides(old, next []fleeetv1.NamedSync, r *fleeetv1.Remote) []string {
	var out []string
	for i := range p.after {
		m := &p.after[i]
		s := compile.Find(next, m.Name)
		if len(m.Spec.Overrides) == 0 || s == nil || compile.Same(compile.Find(old, m.Name), s) {
			continue
		}
		out = append(out, m.Name+": "+strings.Join(fleetview.Overrides(m, r), ", "))
	}
	return out
}

func (p *preview) remoteBefore(name string) *fleeetv1.Remote {
	i := slices.IndexFunc(p.remotesBefore, func(r fleeetv1.Remote) bool { return r.Name == name })
	return &p.remotesBefore[i]
}

// eventual is the plan a Remote holds once every rollout of modules is
// through (compile.Eventual) from the parts it holds now, within the
// manager's size limit, as the union of its parts, and the stamps of the
// Modules it leaves out for size, each saying why (TooLarge).
func (p *preview) eventual(ctx context.Context, modules []fleeetv1.Module, r *fleeetv1.Remote) ([]fleeetv1.NamedSync, map[string]fleeetv1.Compiled, error) {
	parts, stamps, err := compile.Eventual(ctx, p.c, modules, r, compile.Held(p.plans[r.Name]), p.maxPlanBytes)
	maps.DeleteFunc(stamps, func(_ string, stamp fleeetv1.Compiled) bool { return stamp.TooLarge == "" })
	return parts.Union(), stamps, err
}

// selection records a Remote the changed Module, or the relabelled Remote's
// Modules, come to select or no longer select.
func (p *preview) selection(before, after *fleeetv1.Remote) {
	selects := func(modules []fleeetv1.Module, name string, r *fleeetv1.Remote) bool {
		i := slices.IndexFunc(modules, func(m fleeetv1.Module) bool { return m.Name == name })
		ok := false
		if i >= 0 {
			ok, _ = compile.Selects(modules[i].Spec.Selector, r)
		}
		return ok
	}
	names := []string{p.module}
	if p.module == "" { // a relabelled Remote: every Module may change its mind
		names = nil
		for _, m := range p.before {
			names = append(names, m.Name)
		}
	}
	for _, name := range names {
		was, is := selects(p.before, name, before), selects(p.after, name, after)
		label := after.Name
		if p.module == "" {
			label = name + " → " + after.Name
		}
		switch {
		case is && !was:
			p.view.Selected = append(p.view.Selected, label)
		case was && !is:
			p.view.Deselected = append(p.view.Deselected, label)
		}
	}
}

// applyModuleFile previews creating or updating the Module in file.
func (p *preview) applyModuleFile(ctx context.Context, file string) error {
	var raw []byte
	var err error
	if file == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}
	m := &fleeetv1.Module{}
	if err := yaml.UnmarshalStrict(raw, m); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if m.Kind != "Module" {
		return fmt.Errorf("%s: kind %q: fleetctl diff -f previews a Module", file, m.Kind)
	}
	if m.Namespace != "" && m.Namespace != p.ns {
		return fmt.Errorf("%s: namespace %s: preview it with -n %s", file, m.Namespace, m.Namespace)
	}
	m.Namespace, p.module = p.ns, m.Name
	i := slices.IndexFunc(p.after, func(o fleeetv1.Module) bool { return o.Name == m.Name })
	if i >= 0 {
		m.ResourceVersion = p.after[i].ResourceVersion
		m.Status = p.after[i].Status
		p.view.Change = fmt.Sprintf("update Module %s/%s", p.ns, m.Name)
		err = p.c.Update(ctx, m, client.DryRunAll)
	} else {
		p.view.Change = fmt.Sprintf("create Module %s/%s", p.ns, m.Name)
		err = p.c.Create(ctx, m, client.DryRunAll)
	}
	if p.refused(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if i >= 0 {
		m.Status = p.after[i].Status // the dry run answers with the stored status
		p.after[i] = *m
	} else {
		p.after = append(p.after, *m)
	}
	return nil
}

// deleteModule previews deleting a Module.
func (p *preview) deleteModule(ctx context.Context, name string) error {
	i := slices.IndexFunc(p.after, func(m fleeetv1.Module) bool { return m.Name == name })
	if i < 0 {
		return fmt.Errorf("module %s not found in namespace %s", name, p.ns)
	}
	p.module, p.view.Change = name, fmt.Sprintf("delete Module %s/%s", p.ns, name)
	if err := p.c.Delete(ctx, &p.after[i], client.DryRunAll); p.refused(err) {
		return nil
	} else if err != nil {
		return err
	}
	p.after = slices.Delete(p.after, i, i+1)
	return nil
}

// relabel previews a change to a Remote's labels, written as kubectl label
// takes them: k=v sets, k- removes.
func (p *preview) relabel(ctx context.Context, name, changes string) error {
	i := slices.IndexFunc(p.remotes, func(r fleeetv1.Remote) bool { return r.Name == name })
	if i < 0 {
		return fmt.Errorf("remote %s not found in namespace %s", name, p.ns)
	}
	r := p.remotes[i].DeepCopy()
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	for _, c := range strings.Split(changes, ",") {
		switch k, v, set := strings.Cut(strings.TrimSpace(c), "="); {
		case set && k != "":
			r.Labels[k] = v
		case strings.HasSuffix(k, "-") && len(k) > 1:
			delete(r.Labels, strings.TrimSuffix(k, "-"))
		default:
			return fmt.Errorf("--labels %q: want k=v to set or k- to remove, comma-separated", c)
		}
	}
	p.view.Change = fmt.Sprintf("relabel Remote %s/%s", p.ns, name)
	if err := p.c.Update(ctx, r, client.DryRunAll); p.refused(err) {
		return nil
	} else if err != nil {
		return err
	}
	p.remotes[i] = *r
	return nil
}

// refused records an admission or validation refusal of the dry run.
func (p *preview) refused(err error) bool {
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
		return false
	}
	p.view.Admitted, p.view.Refusal = false, err.Error()
	return true
}

// diffPlans compares a Remote's plan before and after; nil when equal.
func diffPlans(remote string, before, after []fleeetv1.NamedSync) *RemoteDiff {
	d := &RemoteDiff{Remote: remote}
	moved := map[string]bool{}
	for i := range after {
		s := &after[i]
		old := compile.Find(before, s.Name)
		switch {
		case old == nil:
			d.Added = append(d.Added, s.Name+" "+compile.Version(&s.SyncSpec))
			moved[s.Name] = true
		case !compile.Same(old, s):
			d.Changed = append(d.Changed, SyncDiff{Sync: s.Name, Fields: fieldChanges(old, s)})
			moved[s.Name] = true
		}
	}
	for i := range before {
		if compile.Find(after, before[i].Name) == nil {
			d.Removed = append(d.Removed, before[i].Name)
		}
	}
	g := syncgraph.Build(after)
	for _, s := range after {
		if moved[s.Name] {
			continue
		}
		for _, dep := range g.Deps[s.Name] {
			if moved[dep] {
				d.Held = append(d.Held, fmt.Sprintf("%s (waits for %s)", s.Name, dep))
				break
			}
		}
	}
	if len(d.Added)+len(d.Removed)+len(d.Changed) == 0 {
		return nil
	}
	return d
}

// fieldChanges lists the fields that differ between two syncs as
// "path: old → new", paths in JSON dot notation.
func fieldChanges(before, after *fleeetv1.NamedSync) []string {
	flat := func(s *fleeetv1.NamedSync) map[string]string {
		raw, _ := json.Marshal(s) // the API types always encode
		var doc any
		_ = json.Unmarshal(raw, &doc)
		out := map[string]string{}
		flatten("", doc, out)
		return out
	}
	old, next := flat(before), flat(after)
	var changes []string
	for _, k := range slices.Sorted(maps.Keys(next)) {
		if o, ok := old[k]; !ok {
			changes = append(changes, fmt.Sprintf("%s: (none) → %s", k, next[k]))
		} else if o != next[k] {
			changes = append(changes, fmt.Sprintf("%s: %s → %s", k, o, next[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(old)) {
		if _, ok := next[k]; !ok {
			changes = append(changes, fmt.Sprintf("%s: %s → (none)", k, old[k]))
		}
	}
	return changes
}

// flatten writes every leaf of a decoded JSON document under its dotted
// path (list items as [i]).
func flatten(prefix string, v any, out map[string]string) {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			flatten(strings.TrimPrefix(prefix+"."+k, "."), child, out)
		}
	case []any:
		for i, child := range t {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), child, out)
		}
	default:
		raw, _ := json.Marshal(t)
		out[prefix] = string(raw)
	}
}

func (v *DiffView) print(w io.Writer) {
	fmt.Fprintf(w, "%s\n", v.Change)
	if !v.Admitted {
		fmt.Fprintf(w, "  refused by the apiserver: %s\n  nothing would change\n", v.Refusal)
		return
	}
	fmt.Fprintln(w, "  admitted (server-side dry run)")
	for _, r := range v.Selected {
		fmt.Fprintf(w, "  selects %s\n", r)
	}
	for _, r := range v.Deselected {
		fmt.Fprintf(w, "  no longer selects %s\n", r)
	}
	if len(v.Remotes) == 0 {
		fmt.Fprintln(w, "  no plan changes")
	}
	for _, r := range v.Remotes {
		fmt.Fprintf(w, "Remote %s:\n", r.Remote)
		for _, s := range r.Added {
			fmt.Fprintf(w, "  + %s\n", s)
		}
		for _, s := range r.Removed {
			fmt.Fprintf(w, "  - %s\n", s)
		}
		for _, s := range r.Changed {
			fmt.Fprintf(w, "  ~ %s\n", s.Sync)
			for _, f := range s.Fields {
				fmt.Fprintf(w, "      %s\n", f)
			}
		}
		for _, s := range r.Overrides {
			fmt.Fprintf(w, "  overrides %s\n", s)
		}
		for _, s := range r.Held {
			fmt.Fprintf(w, "  held: %s\n", s)
		}
		for _, s := range r.LeftOut {
			fmt.Fprintf(w, "  left out: %s\n", s)
		}
	}
}
