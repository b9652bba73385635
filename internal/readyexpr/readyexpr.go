// Package readyexpr compiles and evaluates a dependency's readyExpr: a CEL
// expression over the dependency's Flux object that decides whether it is
// ready for the dependent naming it, as Flux's own dependsOn readyExpr does.
// The expression is a tenant's text, so it runs within a cost limit. Its
// errors are CEL's, which may quote values of the dependency's object: the
// tenant's own Flux object, reported only in that tenant's sync status.
package readyexpr

import (
	"errors"
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"k8s.io/apimachinery/pkg/runtime"
)

// Dep is the variable that holds the dependency's Kustomization or
// HelmRelease (metadata, spec and status) in an expression.
const Dep = "dep"

// MaxCost bounds what one evaluation may do, in CEL's cost units (about one
// per field read or comparison): ample for any condition over one object,
// and a bound on an expression written to spin.
const MaxCost = 100_000

var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(cel.Variable(Dep, cel.MapType(cel.StringType, cel.DynType)))
})

// Compile parses and checks an expression: it must read only dep and
// yield a bool (or a value known only when it runs).
func Compile(expr string) (cel.Program, error) {
	e, err := env()
	if err != nil {
		return nil, err
	}
	ast, issues := e.Compile(expr)
	if err := issues.Err(); err != nil {
		return nil, err
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, fmt.Errorf("yields %s, not a bool", t)
	}
	return e.Program(ast, cel.CostLimit(MaxCost))
}

// compiled keeps the programs Holds compiled, by expression: an agent
// evaluates the same few expressions on every dependency event, and
// compiling and evaluating cost about eight times what evaluating alone
// does (BenchmarkHolds). Expressions are tenants' text, so at most
// maxCompiled are kept; past that the cache starts over.
var compiled = struct {
	sync.Mutex
	programs map[string]cel.Program
}{programs: map[string]cel.Program{}}

const maxCompiled = 256

// program returns expr compiled, from the cache when it was compiled
// before. An expression that does not compile is not kept.
func program(expr string) (cel.Program, error) {
	compiled.Lock()
	prg, ok := compiled.programs[expr]
	compiled.Unlock()
	if ok {
		return prg, nil
	}
	prg, err := Compile(expr)
	if err != nil {
		return nil, err
	}
	compiled.Lock()
	defer compiled.Unlock()
	if len(compiled.programs) >= maxCompiled {
		clear(compiled.programs)
	}
	compiled.programs[expr] = prg
	return prg, nil
}

// Holds evaluates expr with dep set to obj, a Kustomization or HelmRelease,
// and reports whether it yields true. An expression that does not compile,
// fails (a field obj does not have yet, the cost limit) or yields anything
// but a bool is an error.
func Holds(expr string, obj runtime.Object) (bool, error) {
	prg, err := program(expr)
	if err != nil {
		return false, err
	}
	doc, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return false, err
	}
	out, _, err := prg.Eval(map[string]any{Dep: doc})
	if err != nil {
		return false, err
	}
	ok, isBool := out.Value().(bool)
	if !isBool {
		return false, errors.New("yields " + out.Type().TypeName() + ", not a bool")
	}
	return ok, nil
}
