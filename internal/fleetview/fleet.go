// Package fleetview is the read model of a tenant's fleet that fleetctl and
// the web dashboard share: it reads a namespace's Modules, Remotes and plans
// (Read), works out what each Remote runs of each Module (Fleet.Cell), explains
// one such cell (Fleet.Why, LastWarnings) and where a Module's rollout stands
// (Fleet.Rollout). Both show the fleet from this one code, so the CLI and the
// pages always agree. It only reads: nothing here writes to the cluster.
package fleetview

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// Scheme holds the kinds fleetctl and the dashboard read and write:
// Kubernetes' own (events, reviews) and fleeet's. Their clients and the
// dashboard's cache are built with it.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, fleeetv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// The states a cell of the fleet grid can be in, worst last.
const (
	StateReady       = "ready"
	StatePending     = "pending"
	StateProgressing = "progressing"
	StateOffline     = "offline"
	StateBlocked     = "blocked"
	StateFailed      = "failed"
)

// Fleet is one tenant namespace's Modules, Remotes and plans.
type Fleet struct {
	Namespace string
	Modules   []fleeetv1.Module
	Remotes   []fleeetv1.Remote
	plans     map[string]fleeetv1.ProxyPlan
}

// Cell is what one Remote runs of one Module.
type Cell struct {
	// Selected is whether the Module's selector matches the Remote.
	Selected bool `json:"selected"`
	// State is one of the State constants, or empty when the Remote
	// neither is selected nor holds the Module's sync.
	State string `json:"state,omitempty"`
	// Version is the version the Remote's plan holds.
	Version string `json:"version,omitempty"`
	// Current is whether that is the Module's current version.
	Current bool `json:"current"`
	// Message is what the cluster reports for the sync.
	Message string `json:"message,omitempty"`
	// BlockedBy names the syncs this one waits for.
	BlockedBy []string `json:"blockedBy,omitempty"`
	// Health is how the sync's workloads are doing, as the cluster reports.
	Health *fleeetv1.WorkloadHealth `json:"health,omitempty"`
	// Drift is the drift the cluster reports in the sync's objects.
	Drift *fleeetv1.SyncDrift `json:"drift,omitempty"`
}

// Text renders a cell for the grid: its state, the version its plan holds
// (marked * when not the Module's current one) and, when the cluster reports
// workloads, their ready pods and why some are not ready, and how often
// drift was detected in its objects, such as "failed v1.2.0 0/2 pods
// CrashLoopBackOff" or "ready 6.9.2 1/1 pods drift 1×"; "-" for an empty
// cell.
func (c Cell) Text() string {
	if c.State == "" {
		return "-"
	}
	text := c.State
	if c.Version != "" {
		text += " " + c.Version
		if !c.Current {
			text += "*"
		}
	}
	if h := c.Health; h != nil {
		text += fmt.Sprintf(" %d/%d pods", h.ReadyPods, h.DesiredPods)
		if h.Reason != "" {
			text += " " + h.Reason
		}
	}
	if c.Drift.Seen() {
		text += fmt.Sprintf(" drift %d×", max(c.Drift.Detected, 1))
	}
	return text
}

// Read reads namespace's Modules, Remotes and ProxyAssemblages, with opts
// added to each list. A plan split over several ProxyAssemblages is read as
// the parts its first part lists, each sync whole (plancontent.ResolveAll).
func Read(ctx context.Context, c client.Reader, namespace string, opts ...client.ListOption) (*Fleet, error) {
	f := &Fleet{Namespace: namespace, plans: map[string]fleeetv1.ProxyPlan{}}
	modules, remotes, plans := &fleeetv1.ModuleList{}, &fleeetv1.RemoteList{}, &fleeetv1.ProxyAssemblageList{}
	for _, list := range []client.ObjectList{modules, remotes, plans} {
		if err := c.List(ctx, list, append(opts, client.InNamespace(namespace))...); err != nil {
			return nil, err
		}
	}
	f.Modules, f.Remotes = modules.Items, remotes.Items
	slices.SortFunc(f.Modules, func(a, b fleeetv1.Module) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(f.Remotes, func(a, b fleeetv1.Remote) int { return strings.Compare(a.Name, b.Name) })
	for name, plan := range fleeetv1.GroupProxyPlans(plans.Items) {
		if plan = plan.Listed(); plan != nil {
			f.plans[name] = plan
		}
	}
	if err := plancontent.ResolveAll(ctx, c, namespace, f.plans); err != nil {
		return nil, err
	}
	return f, nil
}

// Plan returns the parts of the named Remote's plan, or nil when the
// compiler has published none yet.
func (f *Fleet) Plan(remote string) fleeetv1.ProxyPlan {
	return f.plans[remote]
}

// Cell works out what remote runs of m.
func (f *Fleet) Cell(m *fleeetv1.Module, remote *fleeetv1.Remote) Cell {
	var cell Cell
	cell.Selected, _ = compile.Selects(m.Spec.Selector, remote)
	pa := f.plans[remote.Name].Holding(m.Name)
	var held *fleeetv1.NamedSync
	if pa != nil {
		held = compile.Find(pa.Spec.Assemblage.Syncs, m.Name)
	}
	if held == nil {
		if cell.Selected {
			cell.State = StatePending
			cell.Message = "not in the cluster's plan yet"
		}
		return cell
	}
	cell.Version = compile.Version(&held.SyncSpec)
	cell.Current = cell.Version == compile.Version(&m.Spec.Sync)
	if remote.Offline() {
		cell.State = StateOffline
		cell.Message = ConditionMessage(remote.Status.Conditions, fleeetv1.ConnectedCondition)
		return cell
	}
	cell.State, cell.Message = StatePending, "the cluster has not reported this plan yet"
	if s := pa.ReportedSync(m.Name); s != nil {
		cell.State = strings.ToLower(string(s.State))
		cell.Message, cell.BlockedBy, cell.Health, cell.Drift = s.Message, s.BlockedBy, s.Health, s.Drift
	}
	return cell
}

// ConditionMessage returns the reason and message of the condition of type
// typ, as "Reason: message", or "" when there is none.
func ConditionMessage(conditions []metav1.Condition, typ string) string {
	if c := apimeta.FindStatusCondition(conditions, typ); c != nil {
		return c.Reason + ": " + c.Message
	}
	return ""
}
