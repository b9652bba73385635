package bindings

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestExpandSubstitutesBindingsAndHonoursEscapes(t *testing.T) {
	values := map[string]string{"REGION": "eu", "ZONE": "eu-1a"}
	cases := map[string]string{
		"":                      "",
		"plain":                 "plain",
		"$(REGION)":             "eu",
		"$(REGION)-$(ZONE)":     "eu-eu-1a",
		"$$(REGION)":            "$(REGION)",
		"$$$(REGION)":           "$$(REGION)", // a lone $, then an escape
		"$(UNKNOWN) stays":      "$(UNKNOWN) stays",
		"unterminated $(REGION": "unterminated $(REGION",
		"echo $(date) $$(x)":    "echo $(date) $(x)",
		"price: $5 for $(ZONE)": "price: $5 for eu-1a",
	}
	for in, want := range cases {
		NewWithT(t).Expect(Expand(in, values)).To(Equal(want), "expand(%q)", in)
	}
}

func TestExpandEarlyKeepsEscapesAndEscapesWhatItSubstitutes(t *testing.T) {
	values := map[string]string{"REGION": "eu", "NOTE": "cost $(TOKEN)", "PRICE": "5$", "ESCAPED": "$$(x)"}
	cases := map[string]string{
		"":                      "",
		"plain":                 "plain",
		"$(REGION)":             "eu",
		"$(TOKEN) stays":        "$(TOKEN) stays",
		"$$(REGION)":            "$$(REGION)",
		"$(NOTE)":               "cost $$(TOKEN)",
		"$(PRICE)(TOKEN)":       "5$$(TOKEN)",
		"$(PRICE)$$(TOKEN)":     "5$$$(TOKEN)",
		"$(ESCAPED)":            "$$$(x)",
		"$(REGION)$$(ZONE)":     "eu$$(ZONE)",
		"unterminated $(REGION": "unterminated $(REGION",
	}
	for in, want := range cases {
		NewWithT(t).Expect(ExpandEarly(in, values)).To(Equal(want), "expandEarly(%q)", in)
	}
}

// TestTwoLayersExpandEachMentionOnce runs the manager's layer, then the
// agent's: what the first substitutes, and its escapes, arrive literally.
func TestTwoLayersExpandEachMentionOnce(t *testing.T) {
	early := map[string]string{"REGION": "eu", "NOTE": "cost $(TOKEN)", "PRICE": "5$", "ESCAPED": "$$(x)"}
	late := map[string]string{"TOKEN": "s3cr3t", "ZONE": "eu-1a"}
	cases := map[string]string{
		"$(REGION)-$(ZONE)":   "eu-eu-1a",
		"$(NOTE)":             "cost $(TOKEN)",
		"$$(TOKEN)":           "$(TOKEN)",
		"$(REGION)$$(ZONE)":   "eu$(ZONE)",
		"$(PRICE)(TOKEN)":     "5$(TOKEN)",
		"$(PRICE)$$(TOKEN)":   "5$$(TOKEN)",
		"$(ESCAPED)":          "$$(x)",
		"$(UNKNOWN) $(TOKEN)": "$(UNKNOWN) s3cr3t",
	}
	for in, want := range cases {
		NewWithT(t).Expect(Expand(ExpandEarly(in, early), late)).To(Equal(want), "%q", in)
	}
}

func TestExpandJSONEarlyEscapesStringLeaves(t *testing.T) {
	g := NewWithT(t)
	out, err := ExpandJSONEarly([]byte(`{"a":"$(X)","keep":"$$(Y)","n":3,"list":["$(Y)"]}`), map[string]string{"X": "$(Y)"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(MatchJSON(`{"a":"$$(Y)","keep":"$$(Y)","n":3,"list":["$(Y)"]}`))
}

func TestExpandJSONRewritesOnlyStringLeaves(t *testing.T) {
	g := NewWithT(t)
	out, err := ExpandJSON([]byte(`{"a":"$(X)","n":3,"list":["$(X)",true],"nested":{"$(X)":"$(X)"}}`), map[string]string{"X": "v"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(MatchJSON(`{"a":"v","n":3,"list":["v",true],"nested":{"$(X)":"v"}}`))
}

func TestLookupPointerFollowsRFC6901(t *testing.T) {
	doc := map[string]any{
		"data":     map[string]any{"a/b": "slash", "m~n": "tilde", "plain": "p"},
		"spec":     map[string]any{"ports": []any{map[string]any{"port": float64(80)}}},
		"metadata": map[string]any{"labels": map[string]any{"region": "eu"}},
	}
	cases := []struct {
		pointer string
		want    any
		err     string
	}{
		{pointer: "/data/a~1b", want: "slash"},
		{pointer: "/data/m~0n", want: "tilde"},
		{pointer: "/spec/ports/0/port", want: float64(80)},
		{pointer: "/metadata/labels/region", want: "eu"},
		{pointer: "/data/missing", err: "field /data/missing not found"},
		{pointer: "/spec/ports/3", err: `no index "3"`},
		{pointer: "data", err: "not a JSON pointer"},
	}
	for _, tc := range cases {
		g := NewWithT(t)
		got, err := lookup(doc, tc.pointer)
		if tc.err != "" {
			g.Expect(err).To(MatchError(ContainSubstring(tc.err)), tc.pointer)
			continue
		}
		g.Expect(err).NotTo(HaveOccurred(), tc.pointer)
		g.Expect(got).To(Equal(tc.want), tc.pointer)
	}
}
