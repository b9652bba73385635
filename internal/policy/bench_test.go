package policy_test

import (
	"context"
	"fmt"
	"maps"
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

// BenchmarkEvaluatePlan is one evaluation for the manager's update of a
// 50-sync ProxyAssemblage — the request every Module version change sends
// once per selected Remote.
func BenchmarkEvaluatePlan(b *testing.B) {
	e, err := policy.New(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	input := load(b, "../../policies/size/samples/allowed/manager-writes-small-plan.yaml")
	syncs := input["object"].(map[string]any)["spec"].(map[string]any)["assemblage"].(map[string]any)["syncs"].([]any)
	one := syncs[0].(map[string]any)
	syncs = syncs[:0]
	for i := range 50 {
		s := maps.Clone(one)
		s["name"] = fmt.Sprintf("module-%02d", i)
		syncs = append(syncs, s)
	}
	input["object"].(map[string]any)["spec"].(map[string]any)["assemblage"].(map[string]any)["syncs"] = syncs
	input["oldObject"] = input["object"]
	ctx := context.Background()
	for b.Loop() {
		d, err := e.Evaluate(ctx, input)
		if err != nil || len(d.Deny) > 0 {
			b.Fatalf("decision %+v, error %v", d, err)
		}
	}
}
