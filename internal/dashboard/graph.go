package dashboard

import (
	"html/template"
	"slices"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
	"github.com/fleeet-dev/fleeet/internal/syncgraph"
)

// The dependency graph's geometry, in SVG user units.
const (
	nodeWidth, nodeHeight = 170, 28
	columnGap, rowGap     = 70, 14
)

type graphNode struct {
	Name, State, Label string
	X, Y               int
}

type graphEdge struct {
	From, To       string
	X1, Y1, X2, Y2 int
	// Blocking marks the dependency the sync waits for now.
	Blocking bool
}

// dependencyGraph draws a plan's syncs as an SVG graph: a sync's
// dependencies stand in the columns left of it, each edge points from a
// sync to what it depends on, and the edges the cluster reports the sync
// blocked on are highlighted. Each node is coloured by its cell's state.
func dependencyGraph(syncs []fleeetv1.NamedSync, cells map[string]fleetview.Cell) template.HTML {
	if len(syncs) == 0 {
		return ""
	}
	g := syncgraph.Build(syncs)
	level := map[string]int{}
	var depth func(name string, seen map[string]bool) int
	depth = func(name string, seen map[string]bool) int {
		if l, ok := level[name]; ok {
			return l
		}
		if seen[name] { // a cycle: syncgraph names it; draw it flat
			return 0
		}
		seen[name] = true
		l := 0
		for _, d := range g.Deps[name] {
			l = max(l, depth(d, seen)+1)
		}
		level[name] = l
		return l
	}
	columns := map[int][]string{}
	var names []string
	for _, s := range syncs {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	width, height := 0, 0
	nodes := map[string]*graphNode{}
	for _, name := range names {
		l := depth(name, map[string]bool{})
		n := &graphNode{Name: name, State: cells[name].State, Label: name,
			X: l * (nodeWidth + columnGap), Y: len(columns[l]) * (nodeHeight + rowGap)}
		if len(n.Label) > 22 {
			n.Label = n.Label[:21] + "…"
		}
		columns[l] = append(columns[l], name)
		nodes[name] = n
		width, height = max(width, n.X+nodeWidth), max(height, n.Y+nodeHeight)
	}
	data := struct {
		Width, Height, NodeWidth, NodeHeight int
		Nodes                                []*graphNode
		Edges                                []graphEdge
	}{Width: width + 2, Height: height + 2, NodeWidth: nodeWidth, NodeHeight: nodeHeight}
	for _, name := range names {
		from := nodes[name]
		data.Nodes = append(data.Nodes, from)
		for _, dep := range g.Deps[name] {
			to := nodes[dep]
			data.Edges = append(data.Edges, graphEdge{From: name, To: dep,
				X1: from.X, Y1: from.Y + nodeHeight/2, X2: to.X + nodeWidth, Y2: to.Y + nodeHeight/2,
				Blocking: slices.Contains(cells[name].BlockedBy, dep)})
		}
	}
	return execute("graph", data)
}
