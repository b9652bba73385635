// Package policy evaluates fleeet's admission policies: the Rego embedded
// from policies/ plus the policies users add in ConfigMaps, compiled once
// into a prepared query and swapped atomically when the user policies change.
//
// The decision document: every package under data.fleeet may define
// `deny contains msg` and `warn contains msg` (sets of strings). A request
// is denied when any package denies; warnings are returned to the client.
//
// User modules live in packages of their own, `fleeet.<name>` with a name
// no embedded policy uses: Rego merges every module of one package, so a
// user module in a built-in package could add rules that switch a built-in
// denial off. In their own packages they can only add denials and warnings.
package policy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/fleeet-dev/fleeet/policies"
)

// query collects every package's deny and warn sets, keyed by package.
const query = `deny := {p: d | d := data.fleeet[p].deny}
warn := {p: w | w := data.fleeet[p].warn}`

// forbidden are the built-ins policies may not call: anything that reaches
// the network or the clock, or returns a different answer each time, so a
// decision depends only on its input.
var forbidden = map[string]bool{
	"http.send": true, "net.lookup_ip_addr": true, "opa.runtime": true,
	"rand.intn": true, "uuid.rfc4122": true,
	"time.now_ns": true, "providers.aws.sign_req": true,
	"crypto.x509.parse_and_verify_certificates":              true,
	"crypto.x509.parse_and_verify_certificates_with_options": true,
	"io.jwt.decode_verify":                                   true,
}

// capabilities are the built-ins and features policies may use.
func capabilities() *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion()
	caps.Builtins = slices.DeleteFunc(slices.Clone(caps.Builtins), func(b *ast.Builtin) bool { return forbidden[b.Name] })
	caps.AllowNet = []string{}
	return caps
}

// Violation is one message from one policy package.
type Violation struct {
	// Policy is the package under data.fleeet that produced the message.
	Policy  string
	Message string
}

// Decision is what the policies say about one input.
type Decision struct {
	Deny []Violation
	Warn []Violation
}

// Engine holds the compiled policies.
type Engine struct {
	builtin map[string]string
	// packages are the names under data.fleeet the embedded policies use.
	packages map[string]bool

	mu       sync.Mutex // serialises recompilation
	prepared atomic.Pointer[rego.PreparedEvalQuery]
}

// New compiles the embedded policies.
func New(ctx context.Context) (*Engine, error) {
	e := &Engine{builtin: map[string]string{}, packages: map[string]bool{}}
	err := fs.WalkDir(policies.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".rego") || strings.HasSuffix(path, "_test.rego") {
			return err
		}
		src, err := fs.ReadFile(policies.FS, path)
		e.builtin["policies/"+path] = string(src)
		return err
	})
	if err != nil {
		return nil, err
	}
	for name, src := range e.builtin {
		m, err := ast.ParseModuleWithOpts(name, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, err
		}
		e.packages[packageName(m)] = true
	}
	return e, e.SetUserPolicies(ctx, nil)
}

// SetUserPolicies compiles the embedded policies together with user
// modules (file name → Rego) and puts them in force. When they do not
// compile, the policies in force stay, and the error names the files.
func (e *Engine) SetUserPolicies(ctx context.Context, user map[string]string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.confined(user); err != nil {
		return err
	}
	pq, err := compile(ctx, e.builtin, user)
	if err != nil {
		return err
	}
	e.prepared.Store(pq)
	return nil
}

// Check compiles user modules with the embedded policies without putting
// them in force, to tell which of several sources is at fault.
func (e *Engine) Check(ctx context.Context, user map[string]string) error {
	if err := e.confined(user); err != nil {
		return err
	}
	_, err := compile(ctx, e.builtin, user)
	return err
}

// confined checks that every user module declares a package of its own:
// fleeet.<name>, one level below fleeet, with a name no embedded policy
// uses. Deeper packages are refused too: their deny rules would never be
// read, and a policy silently ignored is worse than one refused.
func (e *Engine) confined(user map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(user)) {
		m, err := ast.ParseModuleWithOpts(name, user[name], ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return fmt.Errorf("compiling policies: %w", err)
		}
		pkg := packageName(m)
		switch {
		case pkg == "" || strings.Contains(pkg, "."):
			return fmt.Errorf("%s: package %s: a user policy's package must be fleeet.<name>, one level below fleeet", name, m.Package.Path)
		case e.packages[pkg]:
			return fmt.Errorf("%s: package fleeet.%s belongs to a built-in policy; user policies may only add their own packages, never rules to built-in ones", name, pkg)
		}
	}
	return nil
}

// packageName is a module's package below data.fleeet ("lib" for
// fleeet.lib, "a.b" for fleeet.a.b), or "" when it is not below it.
func packageName(m *ast.Module) string {
	path := strings.TrimPrefix(m.Package.Path.String(), "data.")
	rest, ok := strings.CutPrefix(path, "fleeet.")
	if !ok {
		return ""
	}
	return rest
}

func compile(ctx context.Context, builtin, user map[string]string) (*rego.PreparedEvalQuery, error) {
	opts := []func(*rego.Rego){
		rego.Query(query),
		rego.Capabilities(capabilities()),
		rego.SetRegoVersion(ast.RegoV1),
		rego.StrictBuiltinErrors(true),
	}
	for _, m := range []map[string]string{builtin, user} {
		for _, name := range slices.Sorted(maps.Keys(m)) {
			opts = append(opts, rego.Module(name, m[name]))
		}
	}
	pq, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("compiling policies: %w", err)
	}
	return &pq, nil
}

// Evaluate runs every policy against input (a JSON-shaped document). An
// evaluation error is returned, never a partial decision.
func (e *Engine) Evaluate(ctx context.Context, input map[string]any) (Decision, error) {
	value, err := ast.InterfaceToValue(input)
	if err != nil {
		return Decision{}, fmt.Errorf("converting the admission input: %w", err)
	}
	rs, err := e.prepared.Load().Eval(ctx, rego.EvalParsedInput(value))
	if err != nil {
		return Decision{}, fmt.Errorf("evaluating policies: %w", err)
	}
	if len(rs) != 1 {
		return Decision{}, errors.New("evaluating policies: no decision")
	}
	var d Decision
	d.Deny, err = violations(rs[0].Bindings["deny"])
	if err == nil {
		d.Warn, err = violations(rs[0].Bindings["warn"])
	}
	return d, err
}

// violations flattens {package: [message…]} into a sorted list.
func violations(v any) ([]Violation, error) {
	byPolicy, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("policies produced %T, not a set of messages per package", v)
	}
	var out []Violation
	for _, p := range slices.Sorted(maps.Keys(byPolicy)) {
		msgs, ok := byPolicy[p].([]any)
		if !ok {
			return nil, fmt.Errorf("package fleeet.%s: deny and warn must be sets of strings", p)
		}
		for _, m := range msgs {
			s, ok := m.(string)
			if !ok {
				return nil, fmt.Errorf("package fleeet.%s: message %v is not a string", p, m)
			}
			out = append(out, Violation{Policy: p, Message: s})
		}
	}
	slices.SortFunc(out, func(a, b Violation) int {
		return strings.Compare(a.Policy+"\x00"+a.Message, b.Policy+"\x00"+b.Message)
	})
	return out, nil
}
