package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// widgets is a CRD holding one of each kind of field the reference shows,
// served at two versions of which v1 is stored.
const widgets = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names:
    kind: Widget
    listKind: WidgetList
    plural: widgets
    shortNames: [wd]
    singular: widget
  scope: Namespaced
  versions:
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              legacy: {type: string}
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        description: Widget is a thing.
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            description: Spec is what is wanted.
            type: object
            required: [name]
            properties:
              name:
                description: |-
                  Name is the widget's name,
                  split | over lines.
                type: string
                maxLength: 63
                pattern: '^(a|b)+$'
              size:
                type: integer
                format: int32
                minimum: 1
                maximum: 10
                default: 3
              mode:
                type: string
                enum: [Fast, Slow]
                default: Slow
              tags:
                type: array
                maxItems: 4
                items: {type: string, minLength: 1}
              labels:
                type: object
                additionalProperties: {type: string}
              budget:
                anyOf: [{type: integer}, {type: string}]
                x-kubernetes-int-or-string: true
              parts:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string, description: Name of the <part>.}
                    config:
                      type: object
                      x-kubernetes-preserve-unknown-fields: true
                  x-kubernetes-validations:
                  - rule: has(self.config) || self.name == 'x'
                    message: a part needs a config
          status:
            type: object
            properties:
              phase: {type: string}
`

func TestReferenceHasARowForEveryField(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "example.com_widgets.yaml"), []byte(widgets), 0o600)).To(Succeed())
	out := filepath.Join(t.TempDir(), "reference.md")
	g.Expect(run(dir, out)).To(Succeed())
	b, err := os.ReadFile(out)
	g.Expect(err).NotTo(HaveOccurred())
	doc := string(b)

	g.Expect(doc).To(ContainSubstring("\n## Widget\n\n`example.com/v1`, namespaced, short names `wd`. Widget is a thing.\n"))
	rows := []string{
		"| `spec` | object |  |  |  | Spec is what is wanted. |",
		"| `spec.budget` | int or string |  |  |  |  |",
		"| `spec.labels` | map[string]string |  |  |  |  |",
		"| `spec.mode` | string |  | `\"Slow\"` | one of `Fast`, `Slow` |  |",
		"| `spec.name` | string | yes |  | matches `^(a\\|b)+$`; at most 63 characters | Name is the widget's name, split \\| over lines. |",
		"| `spec.parts` | []object |  |  | items unique by `name`; each item: a part needs a config |  |",
		"| `spec.parts[].config` | object (any fields) |  |  |  |  |",
		"| `spec.parts[].name` | string | yes |  |  | Name of the &lt;part>. |",
		"| `spec.size` | integer (int32) |  | `3` | ≥ 1; ≤ 10 |  |",
		"| `spec.tags` | []string |  |  | at most 4 items; each item: at least 1 character |  |",
		"| `status` | object |  |  |  |  |",
		"| `status.phase` | string |  |  |  |  |",
	}
	var table []string
	for line := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(line, "| `") {
			table = append(table, line)
		}
	}
	// Every field, in order, and nothing else: no apiVersion, kind or
	// metadata, no field of the version not stored.
	g.Expect(table).To(Equal(rows))
}

func TestReferenceIsTheSameEveryTime(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "example.com_widgets.yaml"), []byte(widgets), 0o600)).To(Succeed())
	other := strings.ReplaceAll(strings.ReplaceAll(widgets, "widgets", "gadgets"), "Widget", "Gadget")
	g.Expect(os.WriteFile(filepath.Join(dir, "example.com_gadgets.yaml"), []byte(other), 0o600)).To(Succeed())
	var docs []string
	for range 5 {
		out := filepath.Join(t.TempDir(), "reference.md")
		g.Expect(run(dir, out)).To(Succeed())
		b, err := os.ReadFile(out)
		g.Expect(err).NotTo(HaveOccurred())
		docs = append(docs, string(b))
	}
	for _, d := range docs[1:] {
		g.Expect(d).To(Equal(docs[0]))
	}
	g.Expect(strings.Index(docs[0], "## Gadget")).To(BeNumerically("<", strings.Index(docs[0], "## Widget")), "kinds in the order of their names")
}

func TestCellEscapesOnlyWhatBreaksATable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a | b", `a \| b`},
		{"cluster-<uid>", "cluster-&lt;uid>"},
		{"`a<b|c`", "`a<b\\|c`"},
		{"`` x ` y `` <z>", "`` x ` y `` &lt;z>"},
		{"a ` b <c>", "a ` b &lt;c>"},
	} {
		NewWithT(t).Expect(cell(c.in)).To(Equal(c.want), c.in)
	}
}
