package bindings

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
)

// Bindings resolve in order, a literal against those before it; a field
// read is a string as it is and anything else as JSON; the first failure
// names its binding and stops.
func TestResolveInOrderAndNameTheFailingBinding(t *testing.T) {
	g := NewWithT(t)
	region, zone := "eu", "$(REGION)-1a"
	doc := map[string]any{"data": map[string]any{"host": "db.eu", "ports": []any{5432.0}}}
	reads := 0
	read := func() (any, string, error) { reads++; return doc, "ConfigMap team-a/db", nil }
	values, err := Resolve([]Binding{
		{Path: "binding REGION", Name: "REGION", Value: &region},
		{Path: "binding ZONE", Name: "ZONE", Value: &zone},
		{Path: "binding HOST", Name: "HOST", Read: read, Field: "/data/host"},
		{Path: "binding PORTS", Name: "PORTS", Read: read, Field: "/data/ports"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(values).To(Equal(map[string]string{"REGION": "eu", "ZONE": "eu-1a", "HOST": "db.eu", "PORTS": "[5432]"}))
	g.Expect(reads).To(Equal(2))

	_, err = Resolve([]Binding{
		{Path: "binding MISSING", Name: "MISSING", Read: read, Field: "/data/user"},
		{Path: "binding NEVER", Name: "NEVER", Read: func() (any, string, error) { panic("read after a failure") }},
	})
	var e *Error
	g.Expect(errors.As(err, &e)).To(BeTrue())
	g.Expect(e.Path).To(Equal("binding MISSING"))
	g.Expect(err).To(MatchError(HavePrefix("binding MISSING: ConfigMap team-a/db: ")))

	refused := errors.New("forbidden")
	_, err = Resolve([]Binding{{Path: "spec.controlPlaneBindings[X]", Name: "X", Read: func() (any, string, error) { return nil, "", refused }}})
	g.Expect(err).To(MatchError("spec.controlPlaneBindings[X]: forbidden"))
	g.Expect(errors.Is(err, refused)).To(BeTrue())
}
