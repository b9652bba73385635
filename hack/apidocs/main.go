// Command apidocs writes the API reference, docs/reference.md, from the CRDs
// controller-gen generates: one section per kind, one row per field with its
// full path, type, whether it is required, its default, what the apiserver
// validates and its description. The CRDs are what the apiserver enforces,
// so a reference written from them cannot say something else; `make verify`
// fails when the committed reference is not what this writes.
//
// Usage (from `make generate`):
//
//	go run ./hack/apidocs config/crd/bases docs/reference.md
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go run ./hack/apidocs <CRD directory> <reference.md>")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "apidocs:", err)
		os.Exit(1)
	}
}

func run(dir, out string) error {
	crds, err := readCRDs(dir)
	if err != nil {
		return err
	}
	doc, err := render(crds, dir)
	if err != nil {
		return err
	}
	return os.WriteFile(out, doc, 0o644)
}

// readCRDs reads every CustomResourceDefinition in dir's *.yaml files,
// ordered by kind.
func readCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s: kind %q, want CustomResourceDefinition", f, crd.Kind)
		}
		crds = append(crds, crd)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("%s: no CRDs", dir)
	}
	slices.SortFunc(crds, func(a, b *apiextensionsv1.CustomResourceDefinition) int {
		return strings.Compare(a.Spec.Names.Kind, b.Spec.Names.Kind)
	})
	return crds, nil
}

// storageVersion is the version the apiserver stores the kind at, the one
// every served version converts to.
func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensionsv1.CustomResourceDefinitionVersion, error) {
	for i, v := range crd.Spec.Versions {
		if v.Storage {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				return nil, fmt.Errorf("%s: version %s has no openAPIV3Schema", crd.Name, v.Name)
			}
			return &crd.Spec.Versions[i], nil
		}
	}
	return nil, fmt.Errorf("%s: no storage version", crd.Name)
}

// field is one row of the reference.
type field struct {
	path        string
	typ         string
	required    bool
	defaulted   string
	validations []string
	description string
}

// fields lists every field of a kind's schema, depth first in the order of
// their names, leaving out the apiVersion, kind and metadata every object has.
func fields(root *apiextensionsv1.JSONSchemaProps) []field {
	var out []field
	for _, name := range sortedKeys(root.Properties) {
		if name == "apiVersion" || name == "kind" || name == "metadata" {
			continue
		}
		s := root.Properties[name]
		walk(name, &s, slices.Contains(root.Required, name), &out)
	}
	return out
}

// walk adds the row of the field at path and the rows of what it holds:
// an object's properties as path.name, a list's items' as path[].name and a
// map's values' as path.<key>.name.
func walk(path string, s *apiextensionsv1.JSONSchemaProps, required bool, out *[]field) {
	*out = append(*out, field{
		path:        path,
		typ:         typeOf(s),
		required:    required,
		defaulted:   defaultOf(s),
		validations: validations(s),
		description: oneLine(s.Description),
	})
	children(path, s, out)
}

// children adds the rows of the fields s holds.
func children(path string, s *apiextensionsv1.JSONSchemaProps, out *[]field) {
	for _, name := range sortedKeys(s.Properties) {
		p := s.Properties[name]
		walk(path+"."+name, &p, slices.Contains(s.Required, name), out)
	}
	if s.Items != nil && s.Items.Schema != nil {
		children(path+"[]", s.Items.Schema, out)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		children(path+".<key>", s.AdditionalProperties.Schema, out)
	}
}

func sortedKeys(m map[string]apiextensionsv1.JSONSchemaProps) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// typeOf names a schema's type as a Go reader expects it: []T for a list,
// map[string]T for a map, the format after the type.
func typeOf(s *apiextensionsv1.JSONSchemaProps) string {
	switch {
	case s.XIntOrString:
		return "int or string"
	case s.Type == "array":
		if s.Items != nil && s.Items.Schema != nil {
			return "[]" + typeOf(s.Items.Schema)
		}
		return "[]any"
	case s.Type == "object" && len(s.Properties) == 0 && s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
		return "map[string]" + typeOf(s.AdditionalProperties.Schema)
	case s.Type == "object" && len(s.Properties) == 0 && s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields:
		return "object (any fields)"
	case s.Type == "":
		return "any"
	case s.Format != "":
		return s.Type + " (" + s.Format + ")"
	}
	return s.Type
}

// defaultOf is the default the apiserver fills in, as compact JSON.
func defaultOf(s *apiextensionsv1.JSONSchemaProps) string {
	if s.Default == nil {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, s.Default.Raw); err != nil {
		return string(s.Default.Raw)
	}
	return code(b.String())
}

// validations says what the apiserver checks of a value: its own
// constraints, then its items' or its map values'.
func validations(s *apiextensionsv1.JSONSchemaProps) []string {
	v := constraints(s)
	if s.Items != nil && s.Items.Schema != nil && len(s.Items.Schema.Properties) == 0 {
		for _, c := range constraints(s.Items.Schema) {
			v = append(v, "each item: "+c)
		}
	} else if s.Items != nil && s.Items.Schema != nil {
		// An object item's own rules (one of two fields set, say) have no
		// row of their own: its fields' rows start at path[].
		for _, c := range ruleMessages(s.Items.Schema) {
			v = append(v, "each item: "+c)
		}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		for _, c := range constraints(s.AdditionalProperties.Schema) {
			v = append(v, "each value: "+c)
		}
	}
	return v
}

// constraints lists the checks of the schema itself.
func constraints(s *apiextensionsv1.JSONSchemaProps) []string {
	var v []string
	if len(s.Enum) > 0 {
		values := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			values[i] = code(enumValue(e.Raw))
		}
		v = append(v, "one of "+strings.Join(values, ", "))
	}
	if s.Pattern != "" {
		v = append(v, "matches "+code(s.Pattern))
	}
	v = appendRange(v, "character", s.MinLength, s.MaxLength)
	v = appendRange(v, "item", s.MinItems, s.MaxItems)
	v = appendRange(v, "entry", s.MinProperties, s.MaxProperties)
	if s.Minimum != nil {
		op := "≥"
		if s.ExclusiveMinimum {
			op = ">"
		}
		v = append(v, op+" "+strconv.FormatFloat(*s.Minimum, 'f', -1, 64))
	}
	if s.Maximum != nil {
		op := "≤"
		if s.ExclusiveMaximum {
			op = "<"
		}
		v = append(v, op+" "+strconv.FormatFloat(*s.Maximum, 'f', -1, 64))
	}
	if s.MultipleOf != nil {
		v = append(v, "multiple of "+strconv.FormatFloat(*s.MultipleOf, 'f', -1, 64))
	}
	switch {
	case s.XListType != nil && *s.XListType == "set":
		v = append(v, "items unique")
	case s.XListType != nil && *s.XListType == "map":
		keys := make([]string, len(s.XListMapKeys))
		for i, k := range s.XListMapKeys {
			keys[i] = code(k)
		}
		v = append(v, "items unique by "+strings.Join(keys, ", "))
	}
	return append(v, ruleMessages(s)...)
}

// ruleMessages are the schema's CEL rules, each by its message, or by the
// rule where it has none.
func ruleMessages(s *apiextensionsv1.JSONSchemaProps) []string {
	var v []string
	for _, r := range s.XValidations {
		switch {
		case r.Message != "":
			v = append(v, oneLine(r.Message))
		case r.MessageExpression != "":
			v = append(v, "rule "+code(oneLine(r.Rule))+", message "+code(oneLine(r.MessageExpression)))
		default:
			v = append(v, "rule "+code(oneLine(r.Rule)))
		}
	}
	return v
}

// appendRange appends "1 to 63 characters", "at least 1 item" or "at most 16
// items" for the bounds set; unit is singular.
func appendRange(v []string, unit string, lo, hi *int64) []string {
	units := func(n int64) string {
		if n == 1 {
			return unit
		}
		if strings.HasSuffix(unit, "y") {
			return strings.TrimSuffix(unit, "y") + "ies"
		}
		return unit + "s"
	}
	switch {
	case lo != nil && hi != nil:
		return append(v, fmt.Sprintf("%d to %d %s", *lo, *hi, units(*hi)))
	case lo != nil:
		return append(v, fmt.Sprintf("at least %d %s", *lo, units(*lo)))
	case hi != nil:
		return append(v, fmt.Sprintf("at most %d %s", *hi, units(*hi)))
	}
	return v
}

// enumValue shows a string enum value bare and anything else as JSON.
func enumValue(raw []byte) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	return string(raw)
}

// oneLine collapses the text's whitespace, so that it fits a table cell.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cell makes text safe inside a Markdown table cell: a | would end the cell
// (even inside a code span, where \| still stands for it) and, outside code
// spans, a < could open an HTML tag the renderer drops.
func cell(s string) string {
	var b strings.Builder
	for s != "" {
		i := strings.IndexAny(s, "|<`")
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		s = s[i:]
		switch s[0] {
		case '|':
			b.WriteString(`\|`)
			s = s[1:]
		case '<':
			b.WriteString("&lt;")
			s = s[1:]
		default:
			fence := s[:len(s)-len(strings.TrimLeft(s, "`"))]
			end := closingFence(s[len(fence):], fence)
			if end < 0 {
				// No code span: the backticks are text.
				b.WriteString(fence)
				s = s[len(fence):]
				continue
			}
			span := s[:len(fence)+end+len(fence)]
			b.WriteString(strings.ReplaceAll(span, "|", `\|`))
			s = s[len(span):]
		}
	}
	return b.String()
}

// closingFence is the index in s of the run of backticks exactly as long as
// fence that closes a code span, or -1.
func closingFence(s, fence string) int {
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], fence)
		if j < 0 {
			return -1
		}
		start := i + j
		run := len(s[start:]) - len(strings.TrimLeft(s[start:], "`"))
		if run == len(fence) {
			return start
		}
		i = start + run
	}
	return -1
}

// code is s as a Markdown code span, fenced with more backticks than it
// holds.
func code(s string) string {
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}

// render writes the reference: an introduction, an index of the kinds and
// one section per kind.
func render(crds []*apiextensionsv1.CustomResourceDefinition, dir string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "<!-- Generated by make generate (hack/apidocs) from %s; do not edit. -->\n\n", filepath.ToSlash(dir))
	b.WriteString(`# API reference

Every field of every fleeet kind, as the CRDs in ` + "`" + filepath.ToSlash(dir) + "`" + ` define it: what the apiserver
itself checks. The admission webhook judges more (tenant namespaces, sources, versions, windows,
dependencies, reserved labels; see [Writing your own policy](policies.md)), and
[The API by example](api.md) shows how the fields fit together.

A path is a field's place in the object: ` + "`a.b`" + ` is field ` + "`b`" + ` of object ` + "`a`" + `, ` + "`a[].b`" + ` field ` + "`b`" + ` of each
item of list ` + "`a`" + `, ` + "`a.<key>.b`" + ` field ` + "`b`" + ` of each value of map ` + "`a`" + `. *Required* means the
object that holds the field is refused without it. The default is what the apiserver fills in when
the field is absent.

`)
	for _, crd := range crds {
		fmt.Fprintf(&b, "- [%s](#%s)\n", crd.Spec.Names.Kind, strings.ToLower(crd.Spec.Names.Kind))
	}
	for _, crd := range crds {
		v, err := storageVersion(crd)
		if err != nil {
			return nil, err
		}
		renderKind(&b, crd, v)
	}
	return b.Bytes(), nil
}

// renderKind writes one kind's section.
func renderKind(b *bytes.Buffer, crd *apiextensionsv1.CustomResourceDefinition, v *apiextensionsv1.CustomResourceDefinitionVersion) {
	names := crd.Spec.Names
	schema := v.Schema.OpenAPIV3Schema
	fmt.Fprintf(b, "\n## %s\n\n", names.Kind)
	facts := []string{"`" + crd.Spec.Group + "/" + v.Name + "`", strings.ToLower(string(crd.Spec.Scope))}
	if len(names.ShortNames) > 0 {
		facts = append(facts, "short names "+"`"+strings.Join(names.ShortNames, "`, `")+"`")
	}
	fmt.Fprintf(b, "%s. %s\n", strings.Join(facts, ", "), oneLine(schema.Description))
	if rules := ruleMessages(schema); len(rules) > 0 {
		fmt.Fprintf(b, "\nThe apiserver also checks the whole object: %s.\n", strings.Join(rules, "; "))
	}
	b.WriteString("\n| field | type | required | default | validation | description |\n|---|---|---|---|---|---|\n")
	for _, f := range fields(schema) {
		required := ""
		if f.required {
			required = "yes"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", cell(code(f.path)), cell(f.typ), required,
			cell(f.defaulted), cell(strings.Join(f.validations, "; ")), cell(f.description))
	}
}
