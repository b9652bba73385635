package module

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

func TestStampsAreParsedOncePerPlanVersionAndForgottenWithThePlan(t *testing.T) {
	g := NewWithT(t)
	plan := func(name, rv, stamps string) *fleeetv1.ProxyAssemblage {
		return &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, ResourceVersion: rv,
			Annotations: map[string]string{fleeetv1.CompiledAnnotation: stamps}}}
	}
	var s stamps
	a1 := plan("edge-1", "1", `{"app":{"generation":1,"revision":"aaa"}}`)
	g.Expect(s.of(t.Context(), a1).stamps).To(HaveKeyWithValue("app", fleeetv1.Compiled{Generation: 1, Revision: "aaa"}))

	// The same version is not parsed again: an annotation changed in place
	// (which a cached object never is) would go unseen.
	a1.Annotations[fleeetv1.CompiledAnnotation] = `{"app":{"generation":9}}`
	g.Expect(s.of(t.Context(), a1).stamps["app"].Generation).To(Equal(int64(1)))
	// A new version is.
	g.Expect(s.of(t.Context(), plan("edge-1", "2", `{"app":{"generation":2,"revision":"bbb"}}`)).stamps["app"].Revision).To(Equal("bbb"))

	b := plan("edge-2", "3", `{}`)
	s.of(t.Context(), b)
	s.keep("team-a", func(name string) bool { return name == b.Name })
	g.Expect(s.plans["team-a"]).To(HaveLen(1))
	g.Expect(s.plans["team-a"]).To(HaveKey("edge-2"))
}

// A part naming a CompiledPlan is stamped by, and holds the entries of, the
// CompiledPlans it names; one not readable yet says nothing, and is read
// again.
func TestStampsOfAPartNamingACompiledPlan(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(fleeetv1.AddToScheme(scheme)).To(Succeed())
	cp := plancontent.NewPlan("team-a", []fleeetv1.NamedSync{{Name: "app", Content: "app-1"}},
		map[string]fleeetv1.Compiled{"app": {Generation: 2, Revision: "v2"}})
	pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge-1", ResourceVersion: "1",
		Annotations: map[string]string{fleeetv1.CompiledPlanAnnotation: cp.Name}}}
	pa.Spec.CompiledPlan = cp.Name
	pa.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{{Name: "db", Content: "db-1", SyncSpec: fleeetv1.SyncSpec{Secrets: []fleeetv1.SecretDelivery{{Name: "pw"}}}}}

	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	s := stamps{reader: c}
	g.Expect(s.of(t.Context(), pa).holds("app")).To(BeFalse(), "not readable yet")
	g.Expect(c.Create(t.Context(), cp)).To(Succeed())
	got := s.of(t.Context(), pa)
	g.Expect(got.stamps).To(Equal(cp.Spec.Compiled))
	g.Expect(got.holds("app")).To(BeTrue(), "shared")
	g.Expect(got.holds("db")).To(BeTrue(), "its own")
	g.Expect(got.holds("web")).To(BeFalse())
	g.Expect(s.holding(t.Context(), fleeetv1.ProxyPlan{pa}, "app")).To(BeIdenticalTo(pa))
	g.Expect(s.holding(t.Context(), fleeetv1.ProxyPlan{pa}, "web")).To(BeNil())

	// Another plan naming the same CompiledPlan shares what was read of it;
	// once no plan names it, it is forgotten.
	other := pa.DeepCopy()
	other.Name = "edge-2"
	g.Expect(s.of(t.Context(), other).holds("app")).To(BeTrue())
	g.Expect(s.shared["team-a"]).To(HaveLen(1))
	s.keep("team-a", func(string) bool { return false })
	g.Expect(s.shared["team-a"]).To(BeEmpty())
}
