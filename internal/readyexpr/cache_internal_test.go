package readyexpr

import (
	"fmt"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
)

// A tenant writing ever new expressions cannot grow the cache past
// maxCompiled, and an expression that does not compile is not kept.
func TestTheCacheOfProgramsIsBounded(t *testing.T) {
	ks := &kustomizev1.Kustomization{}
	ks.Name = "cni"
	for i := range 3 * maxCompiled {
		if _, err := Holds(fmt.Sprintf("dep.metadata.name == %q", fmt.Sprint(i)), ks); err != nil {
			t.Fatal(err)
		}
		compiled.Lock()
		n := len(compiled.programs)
		compiled.Unlock()
		if n > maxCompiled {
			t.Fatalf("%d programs kept after %d expressions, more than %d", n, i+1, maxCompiled)
		}
	}
	if _, err := Holds("dep.(", ks); err == nil {
		t.Fatal("an expression that does not compile holds")
	}
	compiled.Lock()
	defer compiled.Unlock()
	if _, ok := compiled.programs["dep.("]; ok {
		t.Fatal("an expression that does not compile is kept")
	}
}
