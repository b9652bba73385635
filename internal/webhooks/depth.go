package webhooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxDepth is how deeply an object written to a fleeet kind may nest. Real
// specs, Helm values included, stay far below it; beyond it a policy that
// walks the object costs more than one request should, so one tenant could
// slow every other tenant's admissions.
const MaxDepth = 64

// tooDeep returns the path at which the JSON document raw first nests deeper
// than limit, or "" when it never does. It reads the document as a token
// stream, so the refusal costs no more than the document's size.
// metadata.managedFields is not judged: the apiserver writes it, mirroring
// the object's own fields a few levels deeper, so a refusal names the
// field the user wrote instead.
func tooDeep(raw []byte, limit int) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	// path holds one entry per open object or array: the key or index that
	// leads into the current value.
	type level struct {
		array bool
		key   string
		index int
	}
	var path []level
	expectKey := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) && len(path) > 0 {
			return "", io.ErrUnexpectedEOF
		}
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			path = path[:len(path)-1]
			expectKey = len(path) > 0 && !path[len(path)-1].array
			continue
		}
		if expectKey {
			path[len(path)-1].key = tok.(string)
			expectKey = false
			continue
		}
		// A value: it takes the next index in an array.
		if n := len(path); n > 0 && path[n-1].array {
			path[n-1].index++
		}
		d, open := tok.(json.Delim)
		if open && len(path) == 2 && path[0].key == "metadata" && path[1].key == "managedFields" {
			if err := skip(dec); err != nil {
				return "", err
			}
			open = false
		}
		if !open {
			expectKey = len(path) > 0 && !path[len(path)-1].array
			continue
		}
		if len(path) == limit {
			var b strings.Builder
			for i, l := range path {
				switch {
				case l.array:
					b.WriteString("[" + strconv.Itoa(l.index-1) + "]")
				case i > 0:
					b.WriteString("." + l.key)
				default:
					b.WriteString(l.key)
				}
			}
			return b.String(), nil
		}
		path = append(path, level{array: d == '['})
		expectKey = d == '{'
	}
}

// depthRefusal explains a refusal for an object nested too deeply.
func depthRefusal(path string, limit int) string {
	return fmt.Sprintf("%s: nests deeper than %d levels; flatten it (deeply nested values are refused because judging them would slow every tenant's admissions)", path, limit)
}

// skip reads the rest of a value whose opening delimiter was just read.
func skip(dec *json.Decoder) error {
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}
