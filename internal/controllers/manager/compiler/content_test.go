package compiler_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// readsContent says, as its agent would, that Remote r resolves plan
// entries naming CompiledSyncs.
func readsContent(t *testing.T, r *fleeetv1.Remote) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"readsCompiledSyncs":true}}`))
	NewWithT(t).Expect(cluster.Client.Status().Patch(t.Context(), r, patch)).To(Succeed())
}

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
	readsContent(t, edge)
	readsContent(t, edge2)
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
	readsContent(t, edge)
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
