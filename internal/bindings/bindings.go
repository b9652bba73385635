// Package bindings holds the $(NAME) substitution shared by control-plane
// bindings (resolved by the manager) and sync bindings (resolved by the
// agent): reading a field by JSON pointer and expanding mentions in strings
// and in the string leaves of JSON documents.
package bindings

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Lookup follows an RFC 6901 JSON pointer through decoded JSON.
func Lookup(doc any, pointer string) (any, error) {
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
// are, as in Kubernetes' own $(VAR) expansion of container arguments.
func Expand(s string, values map[string]string) string {
	if !strings.Contains(s, "$(") {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$$("):
			out.WriteString("$(")
			i += 3
		case strings.HasPrefix(s[i:], "$("):
			end := strings.IndexByte(s[i+2:], ')')
			if end >= 0 {
				if v, ok := values[s[i+2:i+2+end]]; ok {
					out.WriteString(v)
					i += end + 3
					continue
				}
			}
			out.WriteString("$(")
			i += 2
		default:
			out.WriteByte(s[i])
			i++
		}
	}
	return out.String()
}

// ExpandJSON applies Expand to every string leaf of a JSON document.
func ExpandJSON(raw []byte, values map[string]string) ([]byte, error) {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	return json.Marshal(expandLeaves(doc, values))
}

func expandLeaves(node any, values map[string]string) any {
	switch v := node.(type) {
	case string:
		return Expand(v, values)
	case map[string]any:
		for k, child := range v {
			v[k] = expandLeaves(child, values)
		}
	case []any:
		for i, child := range v {
			v[i] = expandLeaves(child, values)
		}
	}
	return node
}
