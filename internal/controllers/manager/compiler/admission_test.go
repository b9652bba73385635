package compiler_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// review is a write of a ProxyAssemblage or CompiledSync the webhook was
// asked about: "<user> <operation> <kind> <name>[/<subresource>]", and for
// a plan whether it holds any sync whole.
type review struct {
	what  string
	whole bool
}

// reviews records the reviews the webhook gets.
type reviews struct {
	mu   sync.Mutex
	seen map[string][]review // by "<kind> <name>[/<subresource>]"
}

func (r *reviews) add(req admission.Request) {
	if req.Kind.Kind != "ProxyAssemblage" && req.Kind.Kind != "CompiledSync" {
		return
	}
	key := req.Kind.Kind + " " + req.Name
	if req.SubResource != "" {
		key += "/" + req.SubResource
	}
	pa := &fleeetv1.ProxyAssemblage{}
	_ = json.Unmarshal(req.Object.Raw, pa)
	whole := slices.ContainsFunc(pa.Spec.Assemblage.Syncs, func(s fleeetv1.NamedSync) bool { return s.Content == "" })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string][]review{}
	}
	r.seen[key] = append(r.seen[key], review{what: req.UserInfo.Username + " " + string(req.Operation) + " " + key, whole: whole})
}

// of returns what the webhook was asked about kind name.
func (r *reviews) of(kind, name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rv := range r.seen[kind+" "+name] {
		out = append(out, rv.what)
	}
	return out
}

// thin returns the reviews of plan name naming content alone.
func (r *reviews) thin(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rv := range r.seen["ProxyAssemblage "+name] {
		if !rv.whole {
			out = append(out, rv.what)
		}
	}
	return out
}

// The manager judges its own plan writes in process, by the user policies
// too: a policy that refuses a Remote's plan (here by the Module's name)
// holds the Module back there with PolicyDenied, and no write is made. The
// apiserver then skips the webhook for the manager's plan writes whose
// every entry names content and for its status writes, and calls it for
// every other: a plan holding a sync whole (an agent that reads no
// CompiledSyncs), anyone else's write. CompiledSyncs, where the syncs are,
// are judged by the webhook.
func TestTheManagersPlansNamingContentAreJudgedInProcessAndSkipTheWebhook(t *testing.T) {
	g := NewWithT(t)
	seen := &reviews{}
	const refusal = "spec.assemblage.syncs: a frozen Remote takes no new Module"
	c, manager := startBehindWebhook(t, behindWebhook{asManager: true, seen: seen.add, policies: map[string]string{"frozen.rego": `package fleeet.frozen
deny contains "` + refusal + `" if {
	input.context.plan.remote.labels.frozen == "true"
	"app" in input.context.plan.syncs
}`}})
	ns := c.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	remote := func(name string, labels map[string]string, status string) *fleeetv1.Remote {
		r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
		g.Eventually(func() error { return c.Client.Create(t.Context(), r) }, timeout, poll).Should(Succeed()) // once the webhook answers
		if status != "" {
			reads(t, manager, r, status)
		}
		return r
	}
	edge, old := remote("edge", nil, compiledSyncs), remote("old", nil, "")
	// The rule refuses app on frozen whether the plan holds its entry
	// itself or names the CompiledPlan holding it.
	frozen, frozenShared := remote("frozen", map[string]string{"frozen": "true"}, compiledSyncs), remote("frozen-shared", map[string]string{"frozen": "true"}, compiledPlans)
	// Each Remote has its plan, empty, before the Module exists, so that a
	// refused plan leaves one in place (else a first compile that already
	// saw the Module would be refused before any plan was written).
	for _, r := range []*fleeetv1.Remote{edge, old, frozen, frozenShared} {
		g.Eventually(func(g Gomega) { fleettest.Proxy(g, c.Client, ns, r.Name) }, timeout, poll).Should(Succeed())
	}
	m := fleettest.CreateModule(t, c.Client, ns, "app", "v1.0.0", everyRemote, nil)

	g.Eventually(func(g Gomega) {
		pa := fleettest.Proxy(g, c.Client, ns, edge.Name)
		g.Expect(pa.Spec.Assemblage.Syncs).To(ConsistOf(HaveField("Content", Not(BeEmpty()))))
		whole := fleettest.Proxy(g, c.Client, ns, old.Name).Spec.Assemblage.Syncs
		g.Expect(whole).To(ConsistOf(HaveField("Source.Git.Tag", "v1.0.0")))
		g.Expect(warnings(g, c.Client, ns, "Module", m.Name, fleeetv1.ReasonPolicyDenied)).To(ContainElements(
			"Remote frozen: plan refused by admission policy: "+refusal, "Remote frozen-shared: plan refused by admission policy: "+refusal))
	}, timeout, poll).Should(Succeed())
	for _, r := range []*fleeetv1.Remote{frozen, frozenShared} {
		pa := fleettest.Proxy(g, c.Client, ns, r.Name)
		g.Expect(compile.Find(pa.Spec.Assemblage.Syncs, "app")).To(BeNil(), "refused in process, %s keeps the plan it had", r.Name)
		g.Expect(pa.Spec.CompiledPlan).To(BeEmpty(), "refused in process, %s keeps the plan it had", r.Name)
	}
	// (A plan written before the compiler saw the Remote read content, or
	// before the Module existed, holds a sync whole or nothing.)
	g.Expect(seen.thin(edge.Name)).To(BeEmpty(), "plans naming content skip the webhook")
	g.Expect(seen.thin(frozen.Name)).To(BeEmpty(), "refused in process: never written")
	g.Expect(seen.of("ProxyAssemblage", old.Name)).To(ContainElement(MatchRegexp("^"+managerUser+" (CREATE|UPDATE) ProxyAssemblage old$")),
		"a plan holding a sync whole goes through the webhook")
	content := fleettest.Proxy(g, c.Client, ns, edge.Name).Spec.Assemblage.Syncs[0]
	g.Expect(seen.of("CompiledSync", content.Content)).To(ConsistOf(managerUser+" CREATE CompiledSync "+content.Content),
		"the content is judged by the webhook, once")

	// The apiserver's own account of the skip, written by hand as the
	// manager and as someone else.
	whole := fleettest.Proxy(g, c.Client, ns, old.Name).Spec.Assemblage.Syncs[0]
	whole.Name = "other"
	plan := func(name string, syncs ...fleeetv1.NamedSync) *fleeetv1.ProxyAssemblage {
		pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		pa.Spec.Assemblage.Syncs = syncs
		return pa
	}
	thin := plan("hand-thin", content)
	g.Expect(manager.Create(t.Context(), thin)).To(Succeed())
	g.Expect(seen.of("ProxyAssemblage", "hand-thin")).To(BeEmpty())
	g.Expect(manager.Create(t.Context(), plan("hand-empty"))).To(Succeed())
	g.Expect(seen.of("ProxyAssemblage", "hand-empty")).To(BeEmpty(), "no entry names anything but content")
	g.Expect(manager.Create(t.Context(), plan("hand-mixed", content, whole))).To(Succeed())
	g.Expect(seen.of("ProxyAssemblage", "hand-mixed")).To(ConsistOf(managerUser + " CREATE ProxyAssemblage hand-mixed"))
	// The manager's status writes, its own account, skip it too; anyone
	// else's is judged.
	thin.Status.ObservedGeneration = 1
	g.Expect(manager.Status().Update(t.Context(), thin)).To(Succeed())
	g.Expect(seen.of("ProxyAssemblage", "hand-thin/status")).To(BeEmpty(), "the manager's status write skips the webhook")
	thin.Status.ObservedGeneration = 2
	err := c.Client.Status().Update(t.Context(), thin)
	g.Expect(err).To(MatchError(ContainSubstring("is written only by the fleet manager")))
	g.Expect(seen.of("ProxyAssemblage", "hand-thin/status")).To(ConsistOf(
		And(HaveSuffix(" UPDATE ProxyAssemblage hand-thin/status"), Not(HavePrefix(managerUser)))))
	err = c.Client.Create(t.Context(), plan("hand-admin", content))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "refused by the webhook: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("ProxyAssemblages are compiled by the fleet manager only"))
	g.Expect(c.Client.Get(t.Context(), client.ObjectKeyFromObject(thin), &fleeetv1.ProxyAssemblage{})).To(Succeed())

	// A delete, whose object is null, is judged as before.
	cs := &fleeetv1.CompiledSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: content.Content}}
	err = c.Client.Delete(t.Context(), cs)
	g.Expect(err).To(MatchError(ContainSubstring("is deleted by the fleet manager only")))
	g.Expect(manager.Delete(t.Context(), cs)).To(Succeed())
	g.Expect(seen.of("CompiledSync", content.Content)).To(ContainElement(managerUser + " DELETE CompiledSync " + content.Content))
}

// What an agent says it reads (reads).
const (
	compiledSyncs = `{"readsCompiledSyncs":true}`
	compiledPlans = `{"readsCompiledSyncs":true,"readsCompiledPlans":true}`
)

// reads says, as the Remote's agent would, through c, that Remote r reads
// what status says: compiledSyncs, or compiledPlans as well.
func reads(t *testing.T, c client.Client, r *fleeetv1.Remote, status string) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(`{"status":`+status+`}`))
	NewWithT(t).Expect(c.Status().Patch(context.Background(), r, patch)).To(Succeed())
}
