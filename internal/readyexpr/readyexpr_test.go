package readyexpr_test

import (
	"strings"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fleeet-dev/fleeet/internal/readyexpr"
)

func TestAnExpressionDecidesOverTheDependencysObject(t *testing.T) {
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "cni", Generation: 3, Annotations: map[string]string{"stage": "done"}}}
	ks.Status.ObservedGeneration = 3
	ks.Status.LastAppliedRevision = "v1.4.0@sha1:0123"
	ks.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "HealthCheckFailed"}}
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Name: "db"}}
	hr.Status.History = helmv2.Snapshots{{ChartVersion: "2.1.0", Status: "deployed"}}

	for _, tc := range []struct {
		name, expr string
		obj        runtime.Object
		holds      bool
		err        string
	}{
		{name: "a revision applied", expr: `dep.status.lastAppliedRevision.startsWith("v1.4.")`, obj: ks, holds: true},
		{name: "a generation observed", expr: `dep.status.observedGeneration == dep.metadata.generation`, obj: ks, holds: true},
		{name: "a condition, whatever Ready says", expr: `dep.status.conditions.exists(c, c.type == "Ready" && c.reason == "HealthCheckFailed")`, obj: ks, holds: true},
		{name: "an annotation not set", expr: `has(dep.metadata.annotations.ready)`, obj: ks, holds: false},
		{name: "a HelmRelease's chart", expr: `dep.status.history[0].chartVersion == "2.1.0"`, obj: hr, holds: true},
		{name: "a field not there yet", expr: `dep.status.lastAttemptedRevision == "x"`, obj: hr, err: "no such key: lastAttemptedRevision"},
		{name: "not a bool", expr: `dep.metadata.name`, obj: ks, err: "not a bool"},
		{name: "another variable", expr: `self.status.ready`, obj: ks, err: "undeclared reference to 'self'"},
		{name: "syntax", expr: `dep.status.(`, obj: ks, err: "Syntax error"},
		{name: "a known type that is not a bool", expr: `1 + 2`, obj: ks, err: "yields int, not a bool"},
		{name: "past the cost limit", expr: `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, a+b+c+d+e > 0)))))`, obj: ks, err: "cost limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holds, err := readyexpr.Holds(tc.expr, tc.obj)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error with %q", holds, err, tc.err)
				}
				return
			}
			if err != nil || holds != tc.holds {
				t.Fatalf("got %v, %v; want %v", holds, err, tc.holds)
			}
		})
	}
}

func TestCompileSaysWhatIsWrong(t *testing.T) {
	if _, err := readyexpr.Compile(`dep.status.ready == true`); err != nil {
		t.Errorf("a valid expression: %v", err)
	}
	if _, err := readyexpr.Compile(`"ready"`); err == nil || !strings.Contains(err.Error(), "yields string, not a bool") {
		t.Errorf("a string expression: %v", err)
	}
}

// BenchmarkHolds is one evaluation of an expression the agent has
// evaluated before, as on each event of a dependency.
func BenchmarkHolds(b *testing.B) {
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "cni", Generation: 3}}
	ks.Status.ObservedGeneration = 3
	ks.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "ReconciliationSucceeded"}}
	const expr = `dep.status.observedGeneration == dep.metadata.generation && dep.status.conditions.exists(c, c.type == "Ready" && c.status == "True")`
	for b.Loop() {
		if holds, err := readyexpr.Holds(expr, ks); err != nil || !holds {
			b.Fatalf("got %v, %v", holds, err)
		}
	}
}
