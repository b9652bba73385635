package policy_test

import (
	"context"
	"testing"

	"github.com/fleeet-dev/fleeet/internal/policy"
)

// BenchmarkEvaluate is one evaluation of the full embedded policy set
// through the prepared query, for a Module create with five other Modules
// in its namespace (the dependency policy's graph). Run it with `make bench`.
func BenchmarkEvaluate(b *testing.B) {
	e, err := policy.New(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	input := load(b, "../../policies/dependencies/samples/allowed/depends-on-crds.yaml")
	ctx := context.Background()
	for b.Loop() {
		d, err := e.Evaluate(ctx, input)
		if err != nil || len(d.Deny) > 0 {
			b.Fatalf("decision %+v, error %v", d, err)
		}
	}
}
