package upstream_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	gomegatypes "github.com/onsi/gomega/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// compiled stores sync in the management cluster as the compiler does, in
// a CompiledSync named after a Module of the cluster's namespace, and
// returns the plan entry naming it.
func (l *linked) compiled(t *testing.T, sync fleeetv1.NamedSync) fleeetv1.NamedSync {
	t.Helper()
	m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: sync.Name, UID: types.UID("uid-of-" + sync.Name)}}
	name := plancontent.Name(m, &sync)
	NewWithT(t).Expect(l.mgmt.Client.Create(t.Context(), plancontent.New(m, name, &sync))).To(Succeed())
	return plancontent.Entry(&sync, name)
}

// whole matches the sync s as mirrored from a plan entry naming the
// CompiledSync that holds it: everything the plan left out is there (the
// Assemblage's schema defaults some fields), and no CompiledSync is named.
func whole(s fleeetv1.NamedSync) gomegatypes.GomegaMatcher {
	return And(HaveField("Name", s.Name), HaveField("Content", ""), HaveField("Source", s.Source),
		HaveField("Package.Kustomize.Path", s.Package.Kustomize.Path), HaveField("DependsOn", s.DependsOn), HaveField("Secrets", s.Secrets))
}

// mirroredSyncs returns the syncs of the local Assemblage holding part k.
func (l *linked) mirroredSyncs(g Gomega, k int) []fleeetv1.NamedSync {
	asm := &fleeetv1.Assemblage{}
	g.Expect(l.down.Client.Get(context.Background(), client.ObjectKey{Namespace: l.tenant, Name: fleeetv1.PlanPartName(l.up.Name, k)}, asm)).To(Succeed())
	return asm.Spec.Syncs
}

// A plan whose entries name CompiledSyncs, which the cluster's identity
// may only get by name, runs downstream as if it held the syncs: each
// part's Assemblage holds every sync whole and names no CompiledSync, and
// the cluster reports on the plan's parts as the manager wrote them.
func TestAPlanNamingCompiledSyncsIsMirroredWhole(t *testing.T) {
	g := NewWithT(t)
	l := link(t)
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))

	app, b, c := appSync("v2.0.0"), namedSync("b", "app"), namedSync("c")
	b.Secrets = []fleeetv1.SecretDelivery{{Name: "b-token"}}
	l.writePart(t, 1, "r1", l.compiled(t, b), c)
	appEntry := l.compiled(t, app)
	g.Expect(testenv.Change(t.Context(), l.mgmt.Client, l.plan, func(pa *fleeetv1.ProxyAssemblage) {
		pa.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{appEntry}
		pa.Spec.Assemblage.Parts = []string{"r1"}
	})).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(l.mirroredSyncs(g, 0)).To(HaveExactElements(whole(app)), "the sync whole, naming no CompiledSync")
		g.Expect(l.mirroredPart(g, 1, "r1").Spec.Syncs).To(HaveExactElements(whole(b), whole(c)))
		g.Expect(l.reported(g, 0)).To(ConsistOf(HaveField("Name", "app")))
		g.Expect(l.reported(g, 1)).To(HaveKeyWithValue("b", HaveField("BlockedBy", []string{"app"})))
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
	}, timeout, poll).Should(Succeed())
	pa := &fleeetv1.ProxyAssemblage{}
	g.Expect(l.mgmt.Client.Get(t.Context(), client.ObjectKeyFromObject(l.plan), pa)).To(Succeed())
	g.Expect(pa.Spec.Assemblage.Syncs).To(Equal([]fleeetv1.NamedSync{appEntry}), "the plan keeps naming its CompiledSync")
}

// An entry naming a CompiledSync the cluster cannot read leaves the plan
// not read whole: nothing downstream changes, the Upstream says which
// CompiledSync, and the plan is mirrored once it can be read.
func TestAPlanNamingAMissingCompiledSyncChangesNothingDownstream(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	l := link(t)
	g.Eventually(func(g Gomega) {
		g.Expect(l.mirroredTag(g)).To(Equal("v1.0.0"))
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
	}, timeout, poll).Should(Succeed())
	before := &fleeetv1.Assemblage{}
	g.Expect(l.down.Client.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: l.up.Name}, before)).To(Succeed())

	app := appSync("v2.0.0")
	m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "app", UID: "uid-of-app"}}
	name := plancontent.Name(m, &app)
	g.Expect(testenv.Change(ctx, l.mgmt.Client, l.plan, func(pa *fleeetv1.ProxyAssemblage) {
		pa.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{plancontent.Entry(&app, name)}
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := l.condition(g, fleeetv1.ReadyCondition)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonPlanIncomplete))
		g.Expect(c.Message).To(ContainSubstring("reading CompiledSync " + name + " of sync app"))
		g.Expect(c.Message).To(ContainSubstring("not found"))
		g.Expect(c.Message).To(HaveSuffix("the local Assemblages keep the last plan mirrored"))
	}, timeout, poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		asm := &fleeetv1.Assemblage{}
		g.Expect(l.down.Client.Get(ctx, client.ObjectKeyFromObject(before), asm)).To(Succeed())
		g.Expect(asm.Generation).To(Equal(before.Generation))
		g.Expect(asm.Spec).To(Equal(before.Spec))
	}, 3*time.Second, poll).Should(Succeed(), "what runs keeps running")

	g.Expect(l.mgmt.Client.Create(ctx, plancontent.New(m, name, &app))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(l.mirroredSyncs(g, 0)).To(HaveExactElements(whole(app)))
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
	}, timeout, poll).Should(Succeed())
}
