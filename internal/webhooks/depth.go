package webhooks

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// maxDepth is how deeply an object written to a fleeet kind may nest. Real
// specs, Helm values included, stay far below it; beyond it a policy that
// walks the object costs more than one request should, so one tenant could
// slow every other tenant's admissions.
const maxDepth = 64

// managedFieldsDepth is how deeply metadata.managedFields may nest. The
// apiserver writes it, mirroring the object's own fields a few levels
// deeper, so it gets room of its own, above maxDepth, and a refusal names
// the field the user wrote instead.
const managedFieldsDepth = 2 * maxDepth

// DefaultMaxObjectNodes is how many JSON nodes (objects, arrays, strings,
// numbers, booleans and nulls) an object written to a fleeet kind may hold
// outside metadata.managedFields, unless the manager is told otherwise
// (--max-object-nodes). Judging an object costs CPU and memory in
// proportion to its nodes, each decoded and converted for the policies:
// within the depth and size limits, a Module update carrying a Helm values
// list of 700,000 numbers took 0.42 s of CPU, and sixteen of them in flight
// held both cores and 2.6 GiB of heap (BENCHMARKS.md, "One tenant's flood
// of costly writes"); at this limit an update costs about 0.12 s and
// 80 MiB of heap at its peak. Real specs stay far below it: the whole
// default values of kube-prometheus-stack are 1,750 nodes, cert-manager's
// 350.
const DefaultMaxObjectNodes = 20_000

// managedFieldsNodes is how many JSON nodes metadata.managedFields may hold
// for an object that may hold limit: the apiserver mirrors each field a
// manager owns there, once per manager, so it gets room of its own, twice
// the object's, and a refusal names the field the user wrote instead.
func managedFieldsNodes(limit int) int { return 2 * limit }

// errMalformed reports JSON whose brackets or strings do not close.
var errMalformed = errors.New("malformed JSON: unbalanced brackets or an unterminated string")

// limits are what one object may hold: how deeply it may nest, and how many
// JSON nodes outside metadata.managedFields; 0 is no limit.
type limits struct{ depth, nodes int }

// budget counts the JSON nodes one part of a document holds (an object's
// own fields, its managedFields, the review around the objects) against the
// most it may hold.
type budget struct {
	limit, used int
	managed     bool // an object's managedFields
}

// level is one open object or array on the way to the current value: the
// key or index that leads from it into its child, the budget the nodes in
// it count against and how much of that budget was used when it opened.
type level struct {
	array  bool
	key    []byte // raw, as written between the quotes
	index  int
	budget *budget
	first  int
}

// rule is what applies inside a container about to open: the depth,
// counted from its part's root, at which it is too deep (0 for no limit),
// how many levels of the path lie above that root, and the budget the
// nodes inside it count against (nil for none).
type rule struct {
	limit, root int
	budget      *budget
}

// finding is where a document first breaks a limit: the path to the
// container too deep or, when budget is set, to the container holding most
// of the nodes that took budget over its limit.
type finding struct {
	path   []level
	budget *budget
}

// scanner reads JSON a byte at a time, keeping only the path to the
// current value. It decodes nothing: a refusal costs one pass over the
// document and no allocation per level beyond the path it names.
type scanner struct {
	path []level
	// depth counts open containers, path holds only the first cap of them.
	depth int
	cap   int
	// value, when set, sees each string value with the path to it.
	value func(path []level, raw []byte)
}

// scan walks raw, calling open before each object or array is entered with
// the path leading to it, and counting every value against the budget of
// the container it is in. scan stops at the first container beyond its
// part's depth limit, or at the first value over a budget, and returns
// where.
func (s *scanner) scan(raw []byte, open func(path []level) rule) (*finding, error) {
	expectKey, scalar := false, false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '"':
			end, err := stringEnd(raw, i)
			if err != nil {
				return nil, err
			}
			if !expectKey && s.count() {
				return s.over(), nil
			}
			switch {
			case expectKey && s.depth > 0 && s.depth <= s.cap:
				s.path[s.depth-1].key = raw[i+1 : end]
			case !expectKey && s.value != nil && s.depth <= s.cap:
				s.value(s.path[:s.depth], raw[i+1:end])
			}
			i = end
		case ':':
			expectKey = false
		case ',':
			if s.depth == 0 {
				return nil, errMalformed
			}
			if s.depth <= s.cap && s.path[s.depth-1].array {
				s.path[s.depth-1].index++
			}
			expectKey = s.depth > s.cap || !s.path[s.depth-1].array
		case '{', '[':
			if s.count() {
				return s.over(), nil
			}
			if s.depth < s.cap {
				r := open(s.path[:s.depth])
				if r.limit > 0 && s.depth-r.root >= r.limit {
					return &finding{path: s.path[:s.depth]}, nil
				}
				l := level{array: c == '[', budget: r.budget}
				if r.budget != nil {
					l.first = r.budget.used
				}
				s.path = append(s.path[:s.depth], l)
			}
			s.depth++
			expectKey = c == '{'
		case '}', ']':
			if s.depth == 0 {
				return nil, errMalformed
			}
			s.depth--
			expectKey = false
		case ' ', '\t', '\n', '\r':
		default:
			// The first byte of a number, true, false or null counts it;
			// the bytes after it, up to the next space or punctuation,
			// belong to it.
			if !scalar && s.count() {
				return s.over(), nil
			}
			scalar = true
			continue
		}
		scalar = false
	}
	if s.depth != 0 {
		return nil, errMalformed
	}
	return nil, nil
}

// count counts one value against the budget of the container it is in, and
// reports whether that takes the budget over its limit.
func (s *scanner) count() bool {
	if s.depth == 0 {
		return false
	}
	b := s.path[min(s.depth, s.cap)-1].budget
	if b == nil {
		return false
	}
	b.used++
	return b.used > b.limit
}

// over returns where the value just counted took its budget over the
// limit: the deepest open container holding more than half of the limit,
// or else the outermost one below the budget's own root. That names the
// field to make smaller, not the last of many small ones.
func (s *scanner) over() *finding {
	in := min(s.depth, s.cap) - 1
	b := s.path[in].budget
	root := in
	for root > 0 && s.path[root-1].budget == b {
		root--
	}
	at := min(root+1, in)
	for i := in; i > root; i-- {
		if 2*(b.used-s.path[i].first) > b.limit {
			at = i
			break
		}
	}
	return &finding{path: s.path[:at], budget: b}
}

// stringEnd returns the index of the quote closing the string that opens
// at raw[start], honouring backslash escapes.
func stringEnd(raw []byte, start int) (int, error) {
	for i := start + 1; i < len(raw); i++ {
		switch raw[i] {
		case '\\':
			i++
		case '"':
			return i, nil
		}
	}
	return 0, errMalformed
}

// inManagedFields reports whether path, from an object whose root sits
// root levels down, lies in the object's metadata.managedFields.
func inManagedFields(path []level, root int) bool {
	return len(path) > root+1 && !path[root].array && string(path[root].key) == "metadata" &&
		!path[root+1].array && string(path[root+1].key) == "managedFields"
}

// object is one object a scan judges: where its root sits, what it may
// hold, and what its nodes count against.
type object struct {
	root           int
	own, managed   limits
	nodes, mfNodes budget
	stored         bool
}

// newObject is the object whose root sits root levels down, held to l, and
// its managedFields to their own limits when limitManaged is set (else to
// none). stored marks the object as stored, the old object of an update.
func newObject(root int, l limits, limitManaged, stored bool) *object {
	o := &object{root: root, own: l, stored: stored}
	if limitManaged {
		o.managed = limits{depth: managedFieldsDepth, nodes: managedFieldsNodes(l.nodes)}
	}
	o.nodes.limit, o.mfNodes.limit, o.mfNodes.managed = o.own.nodes, o.managed.nodes, true
	return o
}

// rule is the rule for a container opened at path within the object: its
// own limits, or its managedFields' below metadata.managedFields.
func (o *object) rule(path []level) rule {
	l, b := o.own, &o.nodes
	if inManagedFields(path, o.root) {
		l, b = o.managed, &o.mfNodes
	}
	if l.nodes == 0 {
		b = nil
	}
	return rule{limit: l.depth, root: o.root, budget: b}
}

// breach tells what f, found in o (or in an earlier scan's o of the same
// object), breaks.
func (o *object) breach(f *finding) *breach {
	b := &breach{path: render(f.path[o.root:]), depth: o.own.depth, stored: o.stored}
	if f.budget != nil {
		b.nodes, b.managed = f.budget.limit, f.budget.managed
	} else if inManagedFields(f.path, o.root) {
		b.depth = managedFieldsDepth
	}
	return b
}

// preferWritten runs scan, which returns where a document first breaks a
// limit, with managedFields limited and, when what it finds lies in them,
// again with them unlimited: the apiserver writes managedFields to mirror
// the fields a user wrote, so a refusal names those when there are any.
func preferWritten(scan func(limitManaged bool) (*finding, error), root int) (*finding, error) {
	found, err := scan(true)
	if err != nil || found == nil || !inManagedFields(found.path, root) {
		return found, err
	}
	if written, err := scan(false); err == nil && written != nil {
		return written, nil
	}
	return found, nil
}

// checkObject returns what the JSON object raw first breaks of l (its
// managedFields held to managedFieldsDepth and managedFieldsNodes), or nil
// when it breaks nothing.
func checkObject(raw []byte, l limits) (*breach, error) {
	var o *object
	found, err := preferWritten(func(limitManaged bool) (*finding, error) {
		o = newObject(0, l, limitManaged, false)
		s := &scanner{cap: max(l.depth, managedFieldsDepth) + 1}
		return s.scan(raw, o.rule)
	}, 0)
	if err != nil || found == nil {
		return nil, err
	}
	return o.breach(found), nil
}

// render writes a path as a field path: spec.values.a[2].b.
func render(path []level) string {
	var b strings.Builder
	for i, l := range path {
		switch {
		case l.array:
			b.WriteString("[" + strconv.Itoa(l.index) + "]")
		case i > 0:
			b.WriteString("." + string(l.key))
		default:
			b.Write(l.key)
		}
	}
	return b.String()
}

// breach is a limit an object breaks, as a refusal names it.
type breach struct {
	// path is the field path from the object's root (from the review's,
	// outside the objects).
	path string
	// depth is the nesting limit, broken when nodes is 0.
	depth int
	// nodes is the node limit the object holds more than, its
	// managedFields' when managed is set.
	nodes   int
	managed bool
	// stored is set for the object as stored, an update's old object.
	stored bool
	// review is set for the review around the objects.
	review bool
}

// refusal explains the breach, naming the field and the limit, never what
// the field holds.
func (b *breach) refusal() string {
	if b.nodes == 0 {
		return fmt.Sprintf("%s: nests deeper than %d levels; flatten it (deeply nested values are refused because judging them would slow every tenant's admissions)", b.path, b.depth)
	}
	what, path := "the object holds", b.path
	switch {
	case b.review:
		what = "the review holds, outside its objects,"
	case b.stored:
		what = "the object as stored (the update's old object) holds"
	}
	if b.managed {
		what = strings.Replace(what, "holds", "holds in metadata.managedFields", 1)
	}
	if path == "" {
		path = "(top level)"
	}
	msg := fmt.Sprintf("%s: %s more than %d JSON nodes (objects, arrays and scalars), most of them here", path, what, b.nodes)
	if b.stored {
		return msg + "; it was stored under a higher limit: raise the manager's --max-object-nodes to change it, or delete it and create it again"
	}
	return msg + "; make it smaller (objects this large are refused because judging them would slow every tenant's admissions; the limit is the manager's --max-object-nodes)"
}
