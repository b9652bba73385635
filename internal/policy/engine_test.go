package policy_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/fleeet-dev/fleeet/internal/policy"
)

func newEngine(t *testing.T) *policy.Engine {
	t.Helper()
	e, err := policy.New(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func load(t testing.TB, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var input map[string]any
	if err := yaml.Unmarshal(data, &input); err != nil {
		t.Fatal(err)
	}
	return input
}

// Every policy folder carries samples; allowed ones pass every policy, and
// denied ones are denied by the policy of their folder.
func TestEveryPolicyAllowsAndDeniesItsSamples(t *testing.T) {
	e := newEngine(t)
	dirs, err := filepath.Glob("../../policies/*/policy.rego")
	if err != nil || len(dirs) < 10 {
		t.Fatalf("found %d policies: %v", len(dirs), err)
	}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		name := filepath.Base(dir)
		for _, verdict := range []string{"allowed", "denied"} {
			samples, _ := filepath.Glob(filepath.Join(dir, "samples", verdict, "*.yaml"))
			if len(samples) == 0 {
				t.Errorf("policy %s has no %s samples", name, verdict)
			}
			for _, s := range samples {
				t.Run(name+"/"+verdict+"/"+strings.TrimSuffix(filepath.Base(s), ".yaml"), func(t *testing.T) {
					g := NewWithT(t)
					d, err := e.Evaluate(t.Context(), load(t, s))
					g.Expect(err).NotTo(HaveOccurred())
					if verdict == "allowed" {
						g.Expect(d.Deny).To(BeEmpty())
						return
					}
					g.Expect(d.Deny).To(ContainElement(HaveField("Policy", name)))
				})
			}
		}
	}
}

func TestUserPoliciesTakeEffectAndBadOnesLeaveTheLastGoodSet(t *testing.T) {
	g := NewWithT(t)
	e := newEngine(t)
	ctx := t.Context()
	input := load(t, "../../policies/tenant/samples/allowed/module-in-tenant-namespace.yaml")

	g.Expect(e.SetUserPolicies(ctx, map[string]string{"ops/labels.rego": `package fleeet.labels
deny contains "metadata.labels.owner: every Module names an owner" if not input.object.metadata.labels.owner
warn contains "prefer a team label" if not input.object.metadata.labels.team`})).To(Succeed())
	d, err := e.Evaluate(ctx, input)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Deny).To(Equal([]policy.Violation{{Policy: "labels", Message: "metadata.labels.owner: every Module names an owner"}}))
	g.Expect(d.Warn).To(Equal([]policy.Violation{{Policy: "labels", Message: "prefer a team label"}}))

	err = e.SetUserPolicies(ctx, map[string]string{"ops/broken.rego": "package fleeet.broken\ndeny contains msg if {"})
	g.Expect(err).To(MatchError(ContainSubstring("ops/broken.rego")))
	d, err = e.Evaluate(ctx, input)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Deny).To(HaveLen(1), "the last good set, with the user policy, stays in force")
}

func TestPoliciesCannotReachTheNetworkOrTheClock(t *testing.T) {
	e := newEngine(t)
	for name, body := range map[string]string{
		"http.send":   `deny contains "x" if http.send({"method": "GET", "url": "https://example.com"})`,
		"time.now_ns": `deny contains "x" if time.now_ns() > 0`,
		"rand.intn":   `deny contains "x" if rand.intn("a", 2) == 1`,
		"opa.runtime": `deny contains "x" if opa.runtime()`,
	} {
		t.Run(name, func(t *testing.T) {
			err := e.Check(t.Context(), map[string]string{"user.rego": "package fleeet.user\n" + body})
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring("undefined function " + name)))
		})
	}
}

func TestAnEvaluationErrorIsAnErrorNotADecision(t *testing.T) {
	g := NewWithT(t)
	e := newEngine(t)
	g.Expect(e.SetUserPolicies(t.Context(), map[string]string{"user.rego": `package fleeet.user
deny contains msg if { msg := sprintf("%d", [to_number(input.object.metadata.name)]) }`})).To(Succeed())
	_, err := e.Evaluate(t.Context(), load(t, "../../policies/tenant/samples/allowed/module-in-tenant-namespace.yaml"))
	g.Expect(err).To(MatchError(ContainSubstring("evaluating policies")))
}

// A user module in a built-in package would be merged into it by Rego and
// could, for example, redefine lib.manager so every user counts as the
// manager and the tenant boundary disappears.
func TestUserPoliciesCannotJoinBuiltInPackages(t *testing.T) {
	tenantOutside := load(t, "../../policies/tenant/samples/allowed/module-in-tenant-namespace.yaml")
	tenantOutside["namespace"] = map[string]any{"name": "kube-system", "labels": map[string]any{}}
	for name, tc := range map[string]struct{ src, want string }{
		"into fleeet.lib": {`package fleeet.lib
manager if true`, "package fleeet.lib belongs to a built-in policy"},
		"into fleeet.tenant": {`package fleeet.tenant
tenant_namespace if true`, "package fleeet.tenant belongs to a built-in policy"},
		"into fleeet.targetnamespaces": {`package fleeet.targetnamespaces
deny := set()`, "package fleeet.targetnamespaces belongs to a built-in policy"},
		"below a built-in package": {`package fleeet.tenant.extra
deny contains "x" if false`, "must be fleeet.<name>, one level below fleeet"},
		"outside fleeet": {`package mine
deny contains "x" if true`, "must be fleeet.<name>, one level below fleeet"},
		"fleeet itself": {`package fleeet
tenant := {"deny": set()}`, "must be fleeet.<name>, one level below fleeet"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			e := newEngine(t)
			err := e.SetUserPolicies(t.Context(), map[string]string{"ops/evil.rego": tc.src})
			g.Expect(err).To(MatchError(And(ContainSubstring("ops/evil.rego"), ContainSubstring(tc.want))))
			g.Expect(e.Check(t.Context(), map[string]string{"ops/evil.rego": tc.src})).To(HaveOccurred())
			d, err := e.Evaluate(t.Context(), tenantOutside)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Deny).To(ContainElement(HaveField("Policy", "tenant")), "the built-in denial stays in force")
		})
	}
}
