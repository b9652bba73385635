// Package bindings holds what control-plane bindings (resolved by the
// manager) and sync bindings (resolved by the agent) share: resolving a
// list of bindings in order (Resolve), reading a field by JSON pointer, and
// expanding $(NAME) mentions in strings and in the string leaves of JSON
// documents. A string is expanded once per
// layer: ExpandEarly by the manager, Expand by the agent, so what one layer
// substitutes is never expanded again by the other.
package bindings

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// lookup follows an RFC 6901 JSON pointer through decoded JSON.
func lookup(doc any, pointer string) (any, error) {
	if pointer == "" {
		return doc, nil
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, fmt.Errorf("field path %q is not a JSON pointer", pointer)
	}
	cur := doc
	for _, token := range strings.Split(pointer[1:], "/") {
		token = strings.NewReplacer("~1", "/", "~0", "~").Replace(token)
		switch node := cur.(type) {
		case map[string]any:
			next, ok := node[token]
			if !ok {
				return nil, fmt.Errorf("field %s not found", pointer)
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(token)
			if err != nil || i < 0 || i >= len(node) {
				return nil, fmt.Errorf("field %s not found: no index %q", pointer, token)
			}
			cur = node[i]
		default:
			return nil, fmt.Errorf("field %s not found", pointer)
		}
	}
	return cur, nil
}

// Expand replaces every $(NAME) in s with the value of binding NAME and every
// $$( with a literal $(. Mentions of names that are not bindings stay as they
// are, as in Kubernetes' own $(VAR) expansion of container arguments. It is
// the last expansion a string goes through (the agent's): what it returns is
// used as it is.
func Expand(s string, values map[string]string) string {
	return expand(s, values, false)
}

// ExpandEarly is Expand for a layer that a later Expand follows: the manager
// substitutes control-plane bindings before the agent substitutes sync
// bindings. It writes its result so that the later layer yields every value
// it substituted, and every $$( escape, literally: escapes are kept, and each
// $( in the text around and within the values is escaped as $$(. Mentions of
// other names are left for the later layer. Without this, a control-plane
// value holding $(X), or an escaped $$(X), would become a look-up of the
// downstream binding X.
//
// One juxtaposition has no spelling: a value ending in $ right before a
// mention left for the later layer reads there as an escape.
func ExpandEarly(s string, values map[string]string) string {
	return expand(s, values, true)
}

// expand does one layer of expansion. Early, literal text (values and plain
// text) is gathered in runs and escaped as a whole, so that a $ at the end of
// a value and a ( after it cannot join into a mention.
func expand(s string, values map[string]string, early bool) string {
	if !strings.Contains(s, "$(") {
		return s
	}
	var out, run strings.Builder
	literal := func(text string) {
		if early {
			run.WriteString(text)
		} else {
			out.WriteString(text)
		}
	}
	verbatim := func(text string) {
		out.WriteString(strings.ReplaceAll(run.String(), "$(", "$$("))
		run.Reset()
		out.WriteString(text)
	}
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$$("):
			if early {
				verbatim("$$(")
			} else {
				out.WriteString("$(")
			}
			i += 3
		case strings.HasPrefix(s[i:], "$("):
			end := strings.IndexByte(s[i+2:], ')')
			if end >= 0 {
				if v, ok := values[s[i+2:i+2+end]]; ok {
					literal(v)
					i += end + 3
					continue
				}
			}
			verbatim("$(")
			i += 2
		default:
			literal(s[i : i+1])
			i++
		}
	}
	verbatim("")
	return out.String()
}

// ExpandJSON applies Expand to every string leaf of a JSON document.
func ExpandJSON(raw []byte, values map[string]string) ([]byte, error) {
	return expandJSON(raw, func(s string) string { return Expand(s, values) })
}

// ExpandJSONEarly applies ExpandEarly to every string leaf of a JSON document.
func ExpandJSONEarly(raw []byte, values map[string]string) ([]byte, error) {
	return expandJSON(raw, func(s string) string { return ExpandEarly(s, values) })
}

// ExpandLeavesEarly applies ExpandEarly to every string leaf of a decoded
// JSON document, in place, and returns the document.
func ExpandLeavesEarly(doc any, values map[string]string) any {
	return expandLeaves(doc, func(s string) string { return ExpandEarly(s, values) })
}

func expandJSON(raw []byte, expand func(string) string) ([]byte, error) {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	return json.Marshal(expandLeaves(doc, expand))
}

func expandLeaves(node any, expand func(string) string) any {
	switch v := node.(type) {
	case string:
		return expand(v)
	case map[string]any:
		for k, child := range v {
			v[k] = expandLeaves(child, expand)
		}
	case []any:
		for i, child := range v {
			v[i] = expandLeaves(child, expand)
		}
	}
	return node
}
