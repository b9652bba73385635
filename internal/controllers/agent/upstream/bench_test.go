package upstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// BenchmarkASplitPlanOfTwoThousandSyncs measures how long a Remote selected
// by 2,000 Modules takes to get its whole plan: 2,000 git syncs written over
// four ProxyAssemblages of 500 (further parts first, part 0 last, as the
// compiler writes them) until the agent has mirrored them and every
// downstream part reports its syncs applied (a GitRepository and a
// Kustomization each; no Flux controller runs, so none gets Ready), then
// until every part's status upstream reports its 500 syncs for its current
// generation.
// The plan of one part of 500 syncs, what one object holds, is the
// comparison on the same setup.
func BenchmarkASplitPlanOfTwoThousandSyncs(b *testing.B) {
	for _, parts := range []int{1, 4} {
		b.Run(fmt.Sprintf("%dx500", parts), func(b *testing.B) { benchmarkPlan(b, parts, 500) })
	}
}

// benchmarkPlan measures a plan of parts parts of perPart syncs each.
func benchmarkPlan(b *testing.B, parts, perPart int) {
	for range b.N {
		g := NewWithT(b)
		l := link(b)
		g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))
		syncs := func(k int) []fleeetv1.NamedSync {
			var out []fleeetv1.NamedSync
			for i := range perPart {
				out = append(out, namedSync(fmt.Sprintf("s%d-%03d", k, i)))
			}
			return out
		}
		b.ResetTimer()
		start := time.Now()
		revs := make([]string, 0, parts-1)
		for k := 1; k < parts; k++ {
			rev := fmt.Sprintf("r%d", k)
			l.writePart(b, k, rev, syncs(k)...)
			revs = append(revs, rev)
		}
		g.Eventually(func() error {
			if err := l.mgmt.Client.Get(b.Context(), client.ObjectKeyFromObject(l.plan), l.plan); err != nil {
				return err
			}
			l.plan.Spec.Assemblage.Syncs, l.plan.Spec.Assemblage.Parts = syncs(0), revs
			return l.mgmt.Client.Update(b.Context(), l.plan)
		}, timeout, poll).Should(Succeed())

		// Polled through the parts' status, four Gets: listing the 2,000
		// Flux objects every second would load the apiserver the agent
		// writes to.
		applied := func(g Gomega) {
			for k := range parts {
				asm := &fleeetv1.Assemblage{}
				g.Expect(l.down.Client.Get(context.Background(), client.ObjectKey{Namespace: l.tenant, Name: fleeetv1.PlanPartName(l.up.Name, k)}, asm)).To(Succeed())
				g.Expect(asm.Status.ObservedGeneration).To(Equal(asm.Generation))
				g.Expect(asm.Status.Summary.Total).To(Equal(int32(perPart)))
				g.Expect(asm.Status.Summary.Progressing).To(Equal(int32(perPart)), "every sync applied, none Ready without Flux")
			}
		}
		g.Eventually(applied, 10*time.Minute, time.Second).Should(Succeed())
		b.ReportMetric(time.Since(start).Seconds(), "s-to-flux-objects")
		g.Eventually(func(g Gomega) {
			for k := range parts {
				g.Expect(l.reported(g, k)).To(HaveLen(perPart), "part %d", k)
			}
		}, 10*time.Minute, time.Second).Should(Succeed())
		b.ReportMetric(time.Since(start).Seconds(), "s-to-status-upstream")
		b.StopTimer()
		list := &kustomizev1.KustomizationList{}
		g.Expect(l.down.Client.List(b.Context(), list, client.InNamespace(l.tenant))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(parts * perPart))
		for i := range list.Items {
			g.Expect(list.Items[i].Labels).To(HaveKeyWithValue(fleeetv1.AssemblageLabel, l.up.Name), "labelled with part 0")
		}
		// Every sync the plan holds is applied once, by part 0's Assemblage.
		first := &fleeetv1.Assemblage{}
		g.Expect(l.down.Client.Get(b.Context(), client.ObjectKey{Namespace: l.tenant, Name: l.up.Name}, first)).To(Succeed())
		g.Expect(first.Status.ObservedGeneration).To(Equal(first.Generation))
		g.Expect(first.Spec.Parts).To(HaveLen(parts - 1))
		g.Expect(metav1.HasAnnotation(first.ObjectMeta, fleeetv1.UpstreamAnnotation)).To(BeTrue())
	}
}
