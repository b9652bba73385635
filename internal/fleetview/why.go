package fleetview

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
)

// WhyView is `fleetctl why -o yaml|json` and the dashboard's cell page: the
// chain from a Module to what one Remote runs of it.
type WhyView struct {
	Module  string `json:"module"`
	Remote  string `json:"remote"`
	Version string `json:"version"`
	// Selection says whether the selector matches the Remote, and how.
	Selection string `json:"selection"`
	// Rollout is the Remote's place in the Module's rollout.
	Rollout string `json:"rollout"`
	// Cell is what the Remote's plan holds and the cluster reports.
	Cell Cell `json:"cell"`
	// Connection is the Remote's Connected condition.
	Connection string `json:"connection"`
	// Overrides names the Module's overrides that pick the Remote, in the
	// order they apply; set when the Module has overrides.
	Overrides []string `json:"overrides,omitempty"`
	// Package is the package the Remote's plan holds, overrides and
	// control-plane bindings applied; set when the Module has overrides.
	Package *fleeetv1.Package `json:"package,omitempty"`
	// Dependencies are the syncs this one waits for, with their state.
	Dependencies []string `json:"dependencies,omitempty"`
	// Warning is the Module's latest warning event about this Remote.
	Warning string `json:"warning,omitempty"`
	// PolicyDenial is the latest refusal by admission policy of this
	// Remote's plan with the Module's sync in it.
	PolicyDenial string `json:"policyDenial,omitempty"`
}

// Print writes the explanation as fleetctl why and the dashboard's cell
// page show it; ns is the Module's namespace.
func (v WhyView) Print(w io.Writer, ns string) {
	state := v.Cell.State
	if state == "" {
		state = "not selected, not held"
	}
	fmt.Fprintf(w, "Module %s/%s at %s on Remote %s: %s\n", ns, v.Module, v.Version, v.Remote, state)
	fmt.Fprintf(w, "  selection:    %s\n", v.Selection)
	fmt.Fprintf(w, "  rollout:      %s\n", v.Rollout)
	fmt.Fprintf(w, "  plan:         %s\n", planLine(v.Cell))
	fmt.Fprintf(w, "  connection:   %s\n", v.Connection)
	if v.Cell.Message != "" {
		fmt.Fprintf(w, "  cluster says: %s\n", v.Cell.Message)
	}
	if v.Overrides != nil {
		fmt.Fprintf(w, "  overrides:    %s\n", strings.Join(v.Overrides, ", "))
	}
	if v.Package != nil {
		raw, _ := yaml.Marshal(v.Package) // the API types always encode
		fmt.Fprintf(w, "  resolved package, as the plan holds it:\n    %s\n",
			strings.ReplaceAll(strings.TrimSpace(string(raw)), "\n", "\n    "))
	}
	if v.Cell.Health != nil {
		fmt.Fprintf(w, "  workloads:    %s\n", v.Cell.Health.Summary())
	}
	if v.Cell.Drift.Seen() {
		fmt.Fprintf(w, "  drift:        %s\n", v.Cell.Drift.Summary())
	}
	for _, d := range v.Dependencies {
		fmt.Fprintf(w, "  waits for:    %s\n", d)
	}
	if v.Warning != "" {
		fmt.Fprintf(w, "  last warning: %s\n", v.Warning)
	}
	denial := v.PolicyDenial
	if denial == "" {
		denial = "none recorded"
	}
	fmt.Fprintf(w, "  policy:       %s\n", denial)
}

// Why explains what r runs of m and why: selection, rollout, plan,
// connection and the dependencies it waits for. The Module's warnings are
// events, which LastWarnings reads.
func (f *Fleet) Why(m *fleeetv1.Module, r *fleeetv1.Remote) WhyView {
	v := WhyView{Module: m.Name, Remote: r.Name, Version: compile.Version(&m.Spec.Sync), Cell: f.Cell(m, r)}
	v.Selection = selection(m, r, v.Cell.Selected)
	v.Rollout = rollout(m, r, v.Cell.Current)
	v.Connection = "Connected: unknown"
	if c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.ConnectedCondition); c != nil {
		v.Connection = fmt.Sprintf("Connected %s (%s: %s)", c.Status, c.Reason, c.Message)
	}
	if len(m.Spec.Overrides) > 0 {
		v.Overrides = Overrides(m, r)
	}
	if plan := f.plans[r.Name]; plan != nil {
		if pa := plan.Holding(m.Name); pa != nil && len(m.Spec.Overrides) > 0 {
			v.Package = &compile.Find(pa.Spec.Assemblage.Syncs, m.Name).Package
		}
		for _, dep := range v.Cell.BlockedBy {
			state := "not reported"
			if s := plan.ReportedSync(dep); s != nil {
				state = strings.ToLower(string(s.State))
				if s.Message != "" {
					state += ": " + s.Message
				}
				if s.Health != nil {
					state += "; workloads: " + s.Health.Summary()
				}
			}
			v.Dependencies = append(v.Dependencies, dep+" — "+state)
		}
	}
	return v
}

// Overrides names the overrides of m that pick r, in the order they apply,
// or says that none does; fleetctl why and diff and the dashboard's cell
// page show it.
func Overrides(m *fleeetv1.Module, r *fleeetv1.Remote) []string {
	picked, err := compile.Matching(m.Spec.Overrides, r)
	if err != nil {
		return []string{err.Error()}
	}
	if len(picked) == 0 {
		return []string{fmt.Sprintf("none of %d picks this Remote", len(m.Spec.Overrides))}
	}
	names := make([]string, len(picked))
	for i, o := range picked {
		names[i] = o.Name
	}
	return names
}

func selection(m *fleeetv1.Module, r *fleeetv1.Remote, selected bool) string {
	if m.Spec.Selector == nil {
		return "not selected: the Module has no selector (it selects no Remote)"
	}
	sel := metav1.FormatLabelSelector(m.Spec.Selector)
	if sel == "<none>" {
		sel = "{} (every Remote)"
	}
	labels := make([]string, 0, len(r.Labels))
	for k, val := range r.Labels {
		labels = append(labels, k+"="+val)
	}
	slices.Sort(labels)
	verdict := "not selected"
	if selected {
		verdict = "selected"
	}
	return fmt.Sprintf("%s: selector %s against labels [%s]", verdict, sel, strings.Join(labels, ","))
}

// rollout says where a rolling update stands for one Remote, which holds the
// Module's current version or not: its stage, and what holds it.
func rollout(m *fleeetv1.Module, r *fleeetv1.Remote, holdsCurrent bool) string {
	if m.Spec.Rollout.Strategy != fleeetv1.RollingUpdateStrategy {
		return "all at once: every selected Remote gets the current version"
	}
	ro := m.Status.Rollout
	if ro == nil || ro.Revision != compile.ModuleRevision(m) {
		return "rolling update: the manager has not planned this version yet"
	}
	if rb := ro.RolledBack; rb != nil {
		return fmt.Sprintf("rolled back to %s (%s) until the Module's sync changes", rb.Version, rb.Message)
	}
	if ro.PausedBy != "" {
		return fmt.Sprintf("rolling update paused by Remote %s (its sync failed on the new version) until it is repaired or the spec changes", ro.PausedBy)
	}
	if holdsCurrent {
		return "rolling update: this Remote holds the current version"
	}
	name, staged := stageOf(m, r)
	stage := ""
	switch {
	case staged && name == "":
		stage = " (the last stage)"
	case staged:
		stage = " (stage " + name + ")"
	}
	if i := slices.Index(ro.Admitted, r.Name); i >= 0 {
		return fmt.Sprintf("rolling update: admitted%s (%d of %d admitted so far)", stage, i+1, len(ro.Admitted))
	}
	if ro.Holding != "" {
		return fmt.Sprintf("rolling update: waiting%s; %s", stage, ro.Holding)
	}
	if current := trackStage(m, ro, name); staged && current != "" && current != name {
		return fmt.Sprintf("rolling update: waiting%s until stage %s, in progress, is done", stage, current)
	}
	limit := "100%"
	if mu := m.Spec.Rollout.MaxUnavailable; mu != nil {
		limit = mu.String()
	}
	return fmt.Sprintf("rolling update: waiting for its turn%s (%d Remotes admitted, maxUnavailable %s)", stage, len(ro.Admitted), limit)
}

// trackStage names the stage in progress in the track of stage name (a
// stage of m's rollout, or "" for the Remotes in no stage, which wait for
// every track: the first's is named).
func trackStage(m *fleeetv1.Module, ro *fleeetv1.RolloutStatus, name string) string {
	i := slices.IndexFunc(m.Spec.Rollout.Stages, func(st fleeetv1.RolloutStage) bool { return st.Name == name })
	if i < 0 {
		return ro.Stage
	}
	for _, t := range ro.Tracks {
		if t.Name == m.Spec.Rollout.Stages[i].Track {
			return t.Stage
		}
	}
	return ro.Stage
}

// stageOf names the rollout stage a Remote belongs to: "" for the implicit
// last one; staged is false for a rollout without stages.
func stageOf(m *fleeetv1.Module, r *fleeetv1.Remote) (name string, staged bool) {
	for _, st := range m.Spec.Rollout.Stages {
		if sel, err := metav1.LabelSelectorAsSelector(&st.Selector); err == nil && sel.Matches(labels.Set(r.Labels)) {
			return st.Name, true
		}
	}
	return "", len(m.Spec.Rollout.Stages) > 0
}

func planLine(c Cell) string {
	switch {
	case c.Version == "":
		return "does not hold this Module's sync"
	case c.Current:
		return "holds the current version " + c.Version
	}
	return "holds " + c.Version + ", not the current version yet"
}

// LastWarnings returns the newest warning event about m that names remote,
// and the newest of those that is a policy denial.
func LastWarnings(ctx context.Context, c client.Reader, m *fleeetv1.Module, remote string) (warning, denial string, err error) {
	events := &corev1.EventList{}
	err = c.List(ctx, events, client.InNamespace(m.Namespace), client.MatchingFieldsSelector{
		Selector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.kind", "Module"),
			fields.OneTermEqualSelector("involvedObject.name", m.Name),
			fields.OneTermEqualSelector("type", corev1.EventTypeWarning)),
	})
	if err != nil {
		return "", "", fmt.Errorf("reading the Module's events: %w", err)
	}
	var last, lastDenial *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if !strings.HasPrefix(e.Message, "Remote "+remote+":") && (e.Related == nil || e.Related.Name != remote) {
			continue
		}
		if last == nil || EventTime(e).After(EventTime(last)) {
			last = e
		}
		if e.Reason == fleeetv1.ReasonPolicyDenied && (lastDenial == nil || EventTime(e).After(EventTime(lastDenial))) {
			lastDenial = e
		}
	}
	return DescribeEvent(last), DescribeEvent(lastDenial), nil
}

// DescribeEvent renders an event as its time, reason and message; "" for
// none.
func DescribeEvent(e *corev1.Event) string {
	if e == nil {
		return ""
	}
	return fmt.Sprintf("%s %s: %s", EventTime(e).UTC().Format("2006-01-02T15:04:05Z"), e.Reason, e.Message)
}

// EventTime is when an event last happened: its event time, else its last
// timestamp, else its creation.
func EventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
