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

// errMalformed reports JSON whose brackets or strings do not close.
var errMalformed = errors.New("malformed JSON: unbalanced brackets or an unterminated string")

// level is one open object or array on the way to the current value: the
// key or index that leads from it into its child.
type level struct {
	array bool
	key   []byte // raw, as written between the quotes
	index int
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
// the path leading to it. open returns the depth (counted from the root of
// the part it judges) at which that part is too deep, 0 for no limit, and
// how many levels of the path belong to the part's root. scan stops at the
// first container beyond its part's limit and returns the path to it.
func (s *scanner) scan(raw []byte, open func(path []level) (limit, root int)) ([]level, error) {
	expectKey := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '"':
			end, err := stringEnd(raw, i)
			if err != nil {
				return nil, err
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
			if s.depth < s.cap {
				if limit, root := open(s.path[:s.depth]); limit > 0 && s.depth-root >= limit {
					return s.path[:s.depth], nil
				}
				s.path = append(s.path[:s.depth], level{array: c == '['})
			}
			s.depth++
			expectKey = c == '{'
		case '}', ']':
			if s.depth == 0 {
				return nil, errMalformed
			}
			s.depth--
			expectKey = false
		}
	}
	if s.depth != 0 {
		return nil, errMalformed
	}
	return nil, nil
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

// objectLimit is the limit for a container opened at path, where the
// object's root sits root levels down: limit, or managed below
// metadata.managedFields (0: none).
func objectLimit(path []level, root, limit, managed int) int {
	if inManagedFields(path, root) {
		return managed
	}
	return limit
}

// preferWritten runs scan, which returns the path to the first container
// too deep, with managedFields limited to managedFieldsDepth and, when what
// it finds lies in them, again with them unlimited: the apiserver writes
// managedFields to mirror the fields a user wrote, so a refusal names those
// when there are any.
func preferWritten(scan func(managed int) ([]level, error), root int) ([]level, error) {
	found, err := scan(managedFieldsDepth)
	if err != nil || found == nil || !inManagedFields(found, root) {
		return found, err
	}
	if written, err := scan(0); err == nil && written != nil {
		return written, nil
	}
	return found, nil
}

// tooDeep returns the path at which the JSON document raw first nests deeper
// than limit, or "" when it never does.
func tooDeep(raw []byte, limit int) (string, error) {
	path, err := preferWritten(func(managed int) ([]level, error) {
		s := &scanner{cap: max(limit, managed) + 1}
		return s.scan(raw, func(p []level) (int, int) { return objectLimit(p, 0, limit, managed), 0 })
	}, 0)
	if err != nil || path == nil {
		return "", err
	}
	return render(path), nil
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

// depthRefusal explains a refusal for an object nested too deeply.
func depthRefusal(path string, limit int) string {
	return fmt.Sprintf("%s: nests deeper than %d levels; flatten it (deeply nested values are refused because judging them would slow every tenant's admissions)", path, limit)
}
