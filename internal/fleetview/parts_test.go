package fleetview

import (
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// A Remote whose plan is split over two parts is one Remote, showing the
// union of its parts' syncs, each with what its own part reports; a part
// the plan no longer lists shows nothing.
func TestASplitPlanShowsAsOneRemoteWithEveryPartsSyncs(t *testing.T) {
	g := NewWithT(t)
	const ns = "team-a"
	sync := fleeetv1.SyncSpec{Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}}}
	module := func(name string, deps ...string) *fleeetv1.Module {
		m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		m.Spec.Selector, m.Spec.Sync = &metav1.LabelSelector{}, *sync.DeepCopy()
		for _, d := range deps {
			m.Spec.Sync.DependsOn = append(m.Spec.Sync.DependsOn, fleeetv1.Dependency{Name: d})
		}
		return m
	}
	part := func(name string, reports ...fleeetv1.SyncStatus) *fleeetv1.ProxyAssemblage {
		pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 2}}
		for _, s := range reports {
			pa.Spec.Assemblage.Syncs = append(pa.Spec.Assemblage.Syncs, fleeetv1.NamedSync{Name: s.Name, SyncSpec: sync})
		}
		pa.Status.ObservedGeneration, pa.Status.Syncs = 2, reports
		return pa
	}
	first := part("edge", fleeetv1.SyncStatus{Name: "crds", State: fleeetv1.SyncReady})
	first.Spec.Assemblage.Parts = []string{"r1"}
	second := part("edge.p1", fleeetv1.SyncStatus{Name: "app", State: fleeetv1.SyncBlocked, Message: "waiting for crds", BlockedBy: []string{"crds"}})
	second.Spec.Assemblage.PartRevision = "r1"
	gone := part("edge.p2", fleeetv1.SyncStatus{Name: "old", State: fleeetv1.SyncReady})
	c := fake.NewClientBuilder().WithScheme(Scheme).WithObjects(
		&fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}},
		module("crds"), module("app", "crds"), module("old"), first, second, gone).Build()

	f, err := Read(t.Context(), c, ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Remotes).To(HaveLen(1))
	var names []string
	for _, s := range f.Plan("edge").Syncs() {
		names = append(names, s.Name)
	}
	g.Expect(names).To(Equal([]string{"crds", "app"}))
	g.Expect(f.Plan("edge.p1")).To(BeNil(), "a part is no plan of its own")

	m := func(name string) *fleeetv1.Module {
		return &f.Modules[slices.IndexFunc(f.Modules, func(m fleeetv1.Module) bool { return m.Name == name })]
	}
	edge := &f.Remotes[0]
	g.Expect(f.Cell(m("crds"), edge).Text()).To(Equal("ready v1.0.0"))
	app := f.Cell(m("app"), edge)
	g.Expect(app.Text()).To(Equal("blocked v1.0.0"))
	g.Expect(app.BlockedBy).To(Equal([]string{"crds"}))
	g.Expect(f.Cell(m("old"), edge)).To(Equal(Cell{Selected: true, State: StatePending, Message: "not in the cluster's plan yet"}))
	// app waits, in part 1, for crds, which part 0 reports.
	g.Expect(f.Why(m("app"), edge).Dependencies).To(Equal([]string{"crds — ready"}))
	g.Expect(f.Rollout(m("app")).Stages).To(Equal([]StageView{{Name: "(rest)", Remotes: 1, Updated: 1}}))

	// A fleet read before part 0 is published shows nothing held yet.
	g.Expect(c.Delete(t.Context(), first)).To(Succeed())
	f, err = Read(t.Context(), c, ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Plan("edge")).To(BeNil())
	g.Expect(f.Cell(m("app"), &f.Remotes[0]).State).To(Equal(StatePending))
}
