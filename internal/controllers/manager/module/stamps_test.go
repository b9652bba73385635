package module

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestStampsAreParsedOncePerPlanVersionAndForgottenWithThePlan(t *testing.T) {
	g := NewWithT(t)
	plan := func(name, rv, stamps string) *fleeetv1.ProxyAssemblage {
		return &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, ResourceVersion: rv,
			Annotations: map[string]string{fleeetv1.CompiledAnnotation: stamps}}}
	}
	var s stamps
	a1 := plan("edge-1", "1", `{"app":{"generation":1,"revision":"aaa"}}`)
	g.Expect(s.of(a1)).To(HaveKeyWithValue("app", fleeetv1.Compiled{Generation: 1, Revision: "aaa"}))

	// The same version is not parsed again: an annotation changed in place
	// (which a cached object never is) would go unseen.
	a1.Annotations[fleeetv1.CompiledAnnotation] = `{"app":{"generation":9}}`
	g.Expect(s.of(a1)["app"].Generation).To(Equal(int64(1)))
	// A new version is.
	g.Expect(s.of(plan("edge-1", "2", `{"app":{"generation":2,"revision":"bbb"}}`))["app"].Revision).To(Equal("bbb"))

	b := plan("edge-2", "3", `{}`)
	s.of(b)
	s.keep("team-a", func(name string) bool { return name == b.Name })
	g.Expect(s.plans["team-a"]).To(HaveLen(1))
	g.Expect(s.plans["team-a"]).To(HaveKey("edge-2"))
}
