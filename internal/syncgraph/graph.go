// Package syncgraph resolves the dependencies between the syncs of one
// plan — by name or by label selector, whatever their kinds — and finds
// dependency cycles. The agent orders its syncs by it; fleetctl diff uses it
// to say which dependents a change would hold.
package syncgraph

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Graph is the dependency graph of a plan's syncs.
type Graph struct {
	// Deps maps each sync to the syncs it depends on, sorted.
	Deps map[string][]string
	// Missing maps a sync to dependencies it names that are not in the plan.
	Missing map[string][]string
	// Invalid maps a sync to why its dependsOn cannot be evaluated.
	Invalid map[string]string
	// Cycles maps each sync on a dependency cycle to that cycle, as a path
	// that starts and ends at the same sync.
	Cycles map[string][]string
	// AnyVersion maps a sync to the dependencies it waits for at any
	// version (readyAt: Any in every entry that selects them).
	AnyVersion map[string]map[string]bool
	// ReadyExprs maps a sync to the dependencies whose readiness for it
	// readyExprs decide, each with those of every entry that selects it:
	// all must hold.
	ReadyExprs map[string]map[string][]string
}

// Build resolves every sync's dependsOn, by name or by label selector
// over the other syncs, and every sync's requiredBy, which makes the syncs
// it selects depend on it, and finds dependency cycles.
func Build(syncs []fleeetv1.NamedSync) *Graph {
	g := &Graph{
		Deps:       map[string][]string{},
		Missing:    map[string][]string{},
		Invalid:    map[string]string{},
		Cycles:     map[string][]string{},
		AnyVersion: map[string]map[string]bool{},
		ReadyExprs: map[string]map[string][]string{},
	}
	names := map[string]bool{}
	for _, s := range syncs {
		names[s.Name] = true
	}
	for _, s := range syncs {
		// set maps each dependency to whether every entry so far asks for
		// it at any version.
		set := map[string]bool{}
		add := func(name string, anyVersion bool, expr string) {
			was, seen := set[name]
			set[name] = anyVersion && (!seen || was)
			if expr == "" {
				return
			}
			if g.ReadyExprs[s.Name] == nil {
				g.ReadyExprs[s.Name] = map[string][]string{}
			}
			if !slices.Contains(g.ReadyExprs[s.Name][name], expr) {
				g.ReadyExprs[s.Name][name] = append(g.ReadyExprs[s.Name][name], expr)
			}
		}
		for i, d := range s.DependsOn {
			anyVersion := d.ReadyAt == fleeetv1.ReadyAtAny
			if d.Name != "" {
				if names[d.Name] {
					add(d.Name, anyVersion, d.ReadyExpr)
				} else {
					g.Missing[s.Name] = append(g.Missing[s.Name], d.Name)
				}
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(d.Selector)
			if err != nil {
				g.Invalid[s.Name] = fmt.Sprintf("dependsOn[%d].selector: %v", i, err)
				continue
			}
			for _, other := range syncs {
				if other.Name != s.Name && sel.Matches(labels.Set(other.Labels)) {
					add(other.Name, anyVersion, d.ReadyExpr)
				}
			}
		}
		for _, other := range syncs {
			if other.Name != s.Name && requires(other, s) {
				add(other.Name, false, "")
			}
		}
		if s.RequiredBy != nil {
			if _, err := metav1.LabelSelectorAsSelector(s.RequiredBy); err != nil {
				g.Invalid[s.Name] = fmt.Sprintf("requiredBy: %v", err)
			}
		}
		for name, anyVersion := range set {
			g.Deps[s.Name] = append(g.Deps[s.Name], name)
			if anyVersion {
				if g.AnyVersion[s.Name] == nil {
					g.AnyVersion[s.Name] = map[string]bool{}
				}
				g.AnyVersion[s.Name][name] = true
			}
		}
		slices.Sort(g.Deps[s.Name])
	}
	g.findCycles(syncs)
	return g
}

// requires says whether prerequisite's requiredBy selects dependent. A
// selector that does not parse selects nothing; Build says why on the
// prerequisite.
func requires(prerequisite, dependent fleeetv1.NamedSync) bool {
	if prerequisite.RequiredBy == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(prerequisite.RequiredBy)
	return err == nil && sel.Matches(labels.Set(dependent.Labels))
}

// findCycles marks every sync that lies on a cycle (Tarjan's strongly
// connected components) with one concrete cycle through it.
func (g *Graph) findCycles(syncs []fleeetv1.NamedSync) {
	index := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var visit func(string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range g.Deps[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var component []string
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			component = append(component, w)
			if w == v {
				break
			}
		}
		if len(component) > 1 || slices.Contains(g.Deps[v], v) {
			for _, m := range component {
				g.Cycles[m] = g.cycleThrough(m, component)
			}
		}
	}
	for _, s := range syncs {
		if _, seen := index[s.Name]; !seen {
			visit(s.Name)
		}
	}
}

// cycleThrough returns a path from start back to start within component,
// which is strongly connected, so such a path exists.
func (g *Graph) cycleThrough(start string, component []string) []string {
	visited := map[string]bool{}
	var path []string
	var walk func(string) bool
	walk = func(v string) bool {
		path = append(path, v)
		for _, w := range g.Deps[v] {
			if w == start {
				path = append(path, w)
				return true
			}
			if slices.Contains(component, w) && !visited[w] {
				visited[w] = true
				if walk(w) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		return false
	}
	walk(start)
	return path
}

// CycleString renders a cycle as "a → b → a".
func CycleString(cycle []string) string {
	return strings.Join(cycle, " → ")
}
