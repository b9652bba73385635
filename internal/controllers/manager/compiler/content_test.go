package compiler_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// heldContent is the CompiledSync the plan of Remote r names for Module
// app, checked to hold the sync whole and to be named as plancontent
// names it; nil while the plan holds the sync whole.
func heldContent(g Gomega, r *fleeetv1.Remote, m *fleeetv1.Module) *fleeetv1.CompiledSync {
	pa := fleettest.Proxy(g, cluster.Client, r.Namespace, r.Name)
	g.ExpectWithOffset(1, pa.Spec.Assemblage.Syncs).To(HaveLen(1))
	entry := pa.Spec.Assemblage.Syncs[0]
	if entry.Content == "" {
		return nil
	}
	g.ExpectWithOffset(1, entry.Source).To(Equal(fleeetv1.Source{}), "an entry naming content carries no source")
	cs := &fleeetv1.CompiledSync{}
	g.ExpectWithOffset(1, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: r.Namespace, Name: entry.Content}, cs)).To(Succeed())
	g.ExpectWithOffset(1, entry.Content).To(Equal(plancontent.Name(m, &cs.Sync)))
	g.ExpectWithOffset(1, cs.Labels).To(HaveKeyWithValue(fleeetv1.SyncLabel, m.Name))
	return cs
}

// A Remote whose agent reads CompiledSyncs gets a plan naming one
// CompiledSync per version of the Module, shared with every other such
// Remote and holding what a Remote without gets whole; a version change
// names a new one, and the collector deletes the old one once no plan has
// named it for its grace, keeping the one in use. Going back to the old
// version stores the same content under the same name again.
func TestPlansNameSharedCompiledSyncs(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	edge, edge2, old := pullRemote(t, ns, "edge", nil), pullRemote(t, ns, "edge-2", nil), pullRemote(t, ns, "old", nil)
	reads(t, cluster.Client, edge, compiledSyncs)
	reads(t, cluster.Client, edge2, compiledSyncs)
	m := fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, nil)

	var first *fleeetv1.CompiledSync
	g.Eventually(func(g Gomega) {
		first = heldContent(g, edge, m)
		g.Expect(first).NotTo(BeNil())
		g.Expect(first.Sync.Source.Git.Tag).To(Equal("v1.0.0"))
		g.Expect(heldContent(g, edge2, m)).To(HaveField("Name", first.Name), "one CompiledSync for every Remote")
		whole := fleettest.Proxy(g, cluster.Client, ns, old.Name).Spec.Assemblage.Syncs
		g.Expect(whole).To(ConsistOf(first.Sync), "an agent that does not read CompiledSyncs gets the same sync whole")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	g.Expect(testenv.Change(t.Context(), cluster.Client, m, func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v1.1.0" })).To(Succeed())
	var second *fleeetv1.CompiledSync
	g.Eventually(func(g Gomega) {
		second = heldContent(g, edge, m)
		g.Expect(second.Sync.Source.Git.Tag).To(Equal("v1.1.0"))
		g.Expect(heldContent(g, edge2, m)).To(HaveField("Name", second.Name))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(second.Name).NotTo(Equal(first.Name))

	g.Eventually(func() error {
		return cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(first), &fleeetv1.CompiledSync{})
	}).WithTimeout(timeout).WithPolling(poll).Should(Satisfy(apierrors.IsNotFound), "no plan names v1.0.0's content: collected after its grace")
	g.Consistently(func(g Gomega) {
		g.Expect(heldContent(g, edge, m).Annotations).NotTo(HaveKey(fleeetv1.UnreferencedAnnotation))
	}).WithTimeout(2*contentGrace).WithPolling(poll).Should(Succeed(), "the content a plan names stays")

	g.Expect(testenv.Change(t.Context(), cluster.Client, m, func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v1.0.0" })).To(Succeed())
	g.Eventually(func(g Gomega) {
		back := heldContent(g, edge, m)
		g.Expect(back.Name).To(Equal(first.Name), "the same content, under the same name")
		g.Expect(back.UID).NotTo(Equal(first.UID), "stored again")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// The collector does not delete content whose mark the compiler took off
// to name it again: its delete is made on the version it marked.
func TestCollectorKeepsContentNamedAgainBeforeItsGraceEnds(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	edge := pullRemote(t, ns, "edge", nil)
	reads(t, cluster.Client, edge, compiledSyncs)
	m := fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, nil)
	var cs *fleeetv1.CompiledSync
	g.Eventually(func(g Gomega) {
		cs = heldContent(g, edge, m)
		g.Expect(cs).NotTo(BeNil())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// Unselected, the plan names nothing: the collector marks the content.
	g.Expect(testenv.Change(t.Context(), cluster.Client, m, func(m *fleeetv1.Module) { m.Spec.Selector = nil })).To(Succeed())
	g.Eventually(func(g Gomega) {
		get(g, cs)
		g.Expect(cs.Annotations).To(HaveKey(fleeetv1.UnreferencedAnnotation))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	// Selected again within the grace: the compiler unmarks and names it.
	g.Expect(testenv.Change(t.Context(), cluster.Client, m, func(m *fleeetv1.Module) { m.Spec.Selector = everyRemote })).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(heldContent(g, edge, m)).To(HaveField("UID", cs.UID))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(heldContent(g, edge, m)).To(HaveField("UID", cs.UID))
	}).WithTimeout(3 * contentGrace).WithPolling(poll).Should(Succeed())
}

// A user policy over what a sync holds judges content once, when it is
// stored: a Module whose CompiledSync admission refuses keeps what each
// Remote holds of it (the entry naming its earlier content, or nothing),
// says so in a PolicyDenied event naming the Remote and the policy's
// message, and is stamped pending there; the other Modules' changes still
// go out, and no content of the refused source is stored. Once the Module
// moves to a source the policy admits, it goes out too.
func TestARefusedContentHoldsItsModuleBackAndTheOthersGoOn(t *testing.T) {
	g := NewWithT(t)
	const refusal = "sync.source.git.url: untrusted.example.com is not a git server of ours"
	c, manager := startBehindWebhook(t, behindWebhook{asManager: true, policies: map[string]string{"servers.rego": `package fleeet.servers
import data.fleeet.lib
deny contains "` + refusal + `" if {
	some s in lib.syncs
	startswith(s.source.git.url, "https://untrusted.example.com/")
}`}})
	ns := c.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	edge := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}}
	g.Eventually(func() error { return c.Client.Create(t.Context(), edge) }, timeout, poll).Should(Succeed()) // once the webhook answers
	reads(t, manager, edge, compiledSyncs)
	app := fleettest.CreateModule(t, c.Client, ns, "app", "v1.0.0", everyRemote, nil)
	other := fleettest.CreateModule(t, c.Client, ns, "other", "v1.0.0", everyRemote, nil)
	entries := func(g Gomega) (*fleeetv1.ProxyAssemblage, map[string]*fleeetv1.CompiledSync) {
		pa := fleettest.Proxy(g, c.Client, ns, edge.Name)
		held := map[string]*fleeetv1.CompiledSync{}
		for _, s := range pa.Spec.Assemblage.Syncs {
			g.Expect(s.Content).NotTo(BeEmpty())
			cs := &fleeetv1.CompiledSync{}
			g.Expect(c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: s.Content}, cs)).To(Succeed())
			held[s.Name] = cs
		}
		return pa, held
	}
	var before map[string]*fleeetv1.CompiledSync
	g.Eventually(func(g Gomega) {
		_, before = entries(g)
		g.Expect(before).To(HaveKey("app"))
		g.Expect(before).To(HaveKey("other"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	untrusted := func(m *fleeetv1.Module) {
		m.Spec.Sync.Source.Git.URL, m.Spec.Sync.Source.Git.Tag = "https://untrusted.example.com/"+m.Name+".git", "v1.1.0"
	}
	g.Expect(testenv.Change(t.Context(), c.Client, app, untrusted)).To(Succeed())
	g.Expect(testenv.Change(t.Context(), c.Client, other, func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v2.0.0" })).To(Succeed())
	fleettest.CreateModule(t, c.Client, ns, "rogue", "v1.0.0", everyRemote, untrusted)
	g.Eventually(func(g Gomega) {
		pa, held := entries(g)
		g.Expect(held["other"].Sync.Source.Git.Tag).To(Equal("v2.0.0"), "the other Module's change goes out")
		g.Expect(held["app"].Name).To(Equal(before["app"].Name), "app keeps the content it had")
		g.Expect(held).NotTo(HaveKey("rogue"), "rogue, held nowhere before, is held nowhere")
		g.Expect(pa.CompiledSyncs()["app"].Pending).To(BeTrue())
		g.Expect(pa.CompiledSyncs()["rogue"].Pending).To(BeTrue())
		g.Expect(warnings(g, c.Client, ns, "Module", "app", fleeetv1.ReasonPolicyDenied)).To(ContainElement(
			"Remote edge: compiled sync refused by admission policy: " + refusal + "; the Remote keeps v1.0.0, and the other Modules' changes go on"))
		g.Expect(warnings(g, c.Client, ns, "Module", "rogue", fleeetv1.ReasonPolicyDenied)).To(ContainElement(
			"Remote edge: compiled sync refused by admission policy: " + refusal + "; the Remote holds nothing of it, and the other Modules' changes go on"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(warnings(g, c.Client, ns, "Module", "other", fleeetv1.ReasonPolicyDenied)).To(BeEmpty())
	contents := &fleeetv1.CompiledSyncList{}
	g.Expect(c.Client.List(t.Context(), contents, client.InNamespace(ns))).To(Succeed())
	for _, cs := range contents.Items {
		g.Expect(cs.Sync.Source.Git.URL).NotTo(HavePrefix("https://untrusted.example.com/"), "refused content is not stored")
	}

	// Moved to a server the policy admits, app goes out.
	g.Expect(testenv.Change(t.Context(), c.Client, app, func(m *fleeetv1.Module) {
		m.Spec.Sync.Source.Git.URL = "https://git.example.com/app.git"
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		pa, held := entries(g)
		g.Expect(held["app"].Sync.Source.Git.Tag).To(Equal("v1.1.0"))
		g.Expect(pa.CompiledSyncs()["app"].Pending).To(BeFalse())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}
