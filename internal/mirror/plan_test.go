package mirror_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/mirror"
)

// part is part k of a plan named edge, holding syncs.
func part(k int, rev string, generation int64, syncs ...string) *fleeetv1.ProxyAssemblage {
	pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: fleeetv1.PlanPartName("edge", k), Generation: generation}}
	pa.Spec.Assemblage.PartRevision = rev
	for _, s := range syncs {
		pa.Spec.Assemblage.Syncs = append(pa.Spec.Assemblage.Syncs, fleeetv1.NamedSync{Name: s})
	}
	return pa
}

func TestAssembleReadsEveryListedPartAndSaysWhichIsMissingOrBehind(t *testing.T) {
	g := NewWithT(t)
	first := part(0, "", 1, "a")
	first.Spec.Assemblage.Parts = []string{"r1", "r2"}
	held := map[int]*fleeetv1.ProxyAssemblage{1: part(1, "r1", 1, "b")}
	read := func(k int) (*fleeetv1.ProxyAssemblage, error) { return held[k], nil }

	_, incomplete, err := mirror.Assemble(first, read)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(incomplete).To(MatchError("part 2 of 3 not read yet"))

	held[2] = part(2, "r1", 1, "c")
	_, incomplete, _ = mirror.Assemble(first, read)
	g.Expect(incomplete).To(MatchError(`part 2 of 3 is at revision "r1", the plan lists "r2"`))

	held[2] = part(2, "r2", 1, "c")
	plan, incomplete, err := mirror.Assemble(first, read)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(incomplete).NotTo(HaveOccurred())
	g.Expect(plan).To(Equal([]*fleeetv1.ProxyAssemblage{first, held[1], held[2]}))
	g.Expect(mirror.Syncs(plan)).To(HaveExactElements(HaveField("Name", "a"), HaveField("Name", "b"), HaveField("Name", "c")))

	_, _, err = mirror.Assemble(first, func(int) (*fleeetv1.ProxyAssemblage, error) { return nil, apierrors.NewTimeoutError("slow", 1) })
	g.Expect(err).To(MatchError(ContainSubstring("reading part 1 of the plan")))
}

// Further parts are written before part 0, which publishes them; parts part
// 0 no longer lists are deleted after it, and only parts part 0 owns.
func TestWriteMirrorsFurtherPartsFirstAndDeletesUnlistedOnesLast(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	scheme := runtime.NewScheme()
	g.Expect(fleeetv1.AddToScheme(scheme)).To(Succeed())
	var writes []string
	record := func(verb string, obj client.Object) { writes = append(writes, verb+" "+obj.GetName()) }
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			record("create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			record("update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			record("delete", obj)
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	d := mirror.Downstream{Client: c, Key: client.ObjectKey{Namespace: "tenant", Name: "edge"}, ServiceAccount: "team",
		Annotations: map[string]string{fleeetv1.UpstreamAnnotation: "agent/team"}}
	plan := func(gen int64, parts ...*fleeetv1.ProxyAssemblage) []*fleeetv1.ProxyAssemblage {
		first := part(0, "", gen, "a")
		for _, p := range parts {
			first.Spec.Assemblage.Parts = append(first.Spec.Assemblage.Parts, p.Spec.Assemblage.PartRevision)
		}
		return append([]*fleeetv1.ProxyAssemblage{first}, parts...)
	}

	asms, changed, err := d.Write(ctx, plan(1, part(1, "r1", 1, "b"), part(2, "r2", 1, "c")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(writes).To(Equal([]string{"create edge", "create edge.p1", "create edge.p2"}), "part 0 is created first, to own the others")
	for k, asm := range asms {
		g.Expect(asm.Spec.ServiceAccountName).To(Equal("team"))
		g.Expect(asm.Annotations).To(HaveKeyWithValue(fleeetv1.UpstreamAnnotation, "agent/team"))
		if k > 0 {
			g.Expect(metav1.IsControlledBy(asm, asms[0])).To(BeTrue())
			g.Expect(asm.OwnerReferences[0].BlockOwnerDeletion).To(BeNil(), "the writer needs no right to part 0's finalizers")
		}
	}
	// Someone else's Assemblage named like a part is never touched.
	g.Expect(c.Create(ctx, &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "edge.p3"},
		Spec: fleeetv1.AssemblageSpec{PartRevision: "x"}})).To(Succeed())

	writes = nil
	_, changed, err = d.Write(ctx, plan(1, part(1, "r1", 1, "b"), part(2, "r2", 1, "c")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse())
	g.Expect(writes).To(BeEmpty(), "an unchanged plan is not written")

	_, changed, err = d.Write(ctx, plan(2, part(1, "r1b", 2, "b", "c")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(writes).To(Equal([]string{"update edge.p1", "update edge", "delete edge.p2"}))
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "edge.p3"}, &fleeetv1.Assemblage{})).To(Succeed())
}
