package assemblage

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// graph is the dependency graph of an assemblage's syncs.
type graph struct {
	// deps maps each sync to the syncs it depends on, sorted.
	deps map[string][]string
	// missing maps a sync to dependencies it names that are not in the assemblage.
	missing map[string][]string
	// invalid maps a sync to why its dependsOn cannot be evaluated.
	invalid map[string]string
	// cycles maps each sync on a dependency cycle to that cycle, as a path
	// that starts and ends at the same sync.
	cycles map[string][]string
}

// buildGraph resolves every sync's dependsOn, by name or by label selector
// over the other syncs, and finds dependency cycles.
func buildGraph(syncs []fleeetv1.NamedSync) *graph {
	g := &graph{
		deps:    map[string][]string{},
		missing: map[string][]string{},
		invalid: map[string]string{},
		cycles:  map[string][]string{},
	}
	names := map[string]bool{}
	for _, s := range syncs {
		names[s.Name] = true
	}
	for _, s := range syncs {
		set := map[string]bool{}
		for i, d := range s.DependsOn {
			if d.Name != "" {
				if names[d.Name] {
					set[d.Name] = true
				} else {
					g.missing[s.Name] = append(g.missing[s.Name], d.Name)
				}
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(d.Selector)
			if err != nil {
				g.invalid[s.Name] = fmt.Sprintf("dependsOn[%d].selector: %v", i, err)
				continue
			}
			for _, other := range syncs {
				if other.Name != s.Name && sel.Matches(labels.Set(other.Labels)) {
					set[other.Name] = true
				}
			}
		}
		for name := range set {
			g.deps[s.Name] = append(g.deps[s.Name], name)
		}
		slices.Sort(g.deps[s.Name])
	}
	g.findCycles(syncs)
	return g
}

// findCycles marks every sync that lies on a cycle (Tarjan's strongly
// connected components) with one concrete cycle through it.
func (g *graph) findCycles(syncs []fleeetv1.NamedSync) {
	index := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var visit func(string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range g.deps[v] {
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
		if len(component) > 1 || slices.Contains(g.deps[v], v) {
			for _, m := range component {
				g.cycles[m] = g.cycleThrough(m, component)
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
func (g *graph) cycleThrough(start string, component []string) []string {
	visited := map[string]bool{}
	var path []string
	var walk func(string) bool
	walk = func(v string) bool {
		path = append(path, v)
		for _, w := range g.deps[v] {
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

// cycleString renders a cycle as "a → b → a".
func cycleString(cycle []string) string {
	return strings.Join(cycle, " → ")
}
