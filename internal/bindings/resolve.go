package bindings

import (
	"encoding/json"
	"fmt"
)

// A Binding is a name given a literal value, or the value of a field of a
// document it reads.
type Binding struct {
	// Path names the binding in messages, such as binding db or
	// spec.controlPlaneBindings[db].
	Path string
	// Name is what $(NAME) mentions.
	Name string
	// Value, when set, is the literal value.
	Value *string
	// Read returns the document the binding reads, and how messages name
	// it (ConfigMap team-a/db); used when Value is nil.
	Read func() (doc any, what string, err error)
	// Field is the JSON pointer of the field read.
	Field string
}

// Error says which binding could not be resolved and why.
type Error struct {
	// Path names the binding, as Binding.Path.
	Path string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Path, e.Err) }

func (e *Error) Unwrap() error { return e.Err }

// Resolve evaluates bindings in order, each against the values of those
// before it: a literal value is expanded in full; a field read is used as
// it is when a string, and as its JSON text otherwise. The first binding
// that cannot be resolved ends it with an *Error.
func Resolve(list []Binding) (map[string]string, error) {
	values := make(map[string]string, len(list))
	for _, b := range list {
		if b.Value != nil {
			values[b.Name] = Expand(*b.Value, values)
			continue
		}
		v, err := read(b)
		if err != nil {
			return nil, &Error{Path: b.Path, Err: err}
		}
		values[b.Name] = v
	}
	return values, nil
}

// read reads one binding's field.
func read(b Binding) (string, error) {
	doc, what, err := b.Read()
	if err != nil {
		return "", err
	}
	v, err := lookup(doc, b.Field)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if s, ok := v.(string); ok {
		return s, nil
	}
	encoded, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%s field %s: %w", what, b.Field, err)
	}
	return string(encoded), nil
}
