package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// SplitPlan writes remote's plan by hand as the compiler writes a plan split
// over len(parts) objects, so that readers can be tested without it: part k
// holds the syncs parts[k] and the stamps of those syncs, part 0 also the
// stamps of the syncs no part holds. The further parts are written first,
// part k at revision r<k>, then part 0, which lists them. The compiler must
// leave the Remote's plan alone (the Remote suspended or not adopted yet).
// It returns the parts as written, part 0 first.
func SplitPlan(g gomega.Gomega, c client.Client, ns, remote string, stamps map[string]fleeetv1.Compiled, parts ...[]fleeetv1.NamedSync) []*fleeetv1.ProxyAssemblage {
	written := make([]*fleeetv1.ProxyAssemblage, len(parts))
	unheld := maps.Clone(stamps)
	for k := len(parts) - 1; k >= 0; k-- {
		pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fleeetv1.PlanPartName(remote, k)}}
		pa.Spec.Assemblage.Syncs = parts[k]
		own := map[string]fleeetv1.Compiled{}
		for _, s := range parts[k] {
			if stamp, ok := stamps[s.Name]; ok {
				own[s.Name] = stamp
				delete(unheld, s.Name)
			}
		}
		if k == 0 {
			maps.Copy(own, unheld)
			for i := 1; i < len(parts); i++ {
				pa.Spec.Assemblage.Parts = append(pa.Spec.Assemblage.Parts, fmt.Sprintf("r%d", i))
			}
		} else {
			pa.Spec.Assemblage.PartRevision = fmt.Sprintf("r%d", k)
		}
		raw, err := json.Marshal(own)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		pa.Annotations = map[string]string{fleeetv1.CompiledAnnotation: string(raw)}
		g.Expect(c.Create(context.Background(), pa)).To(gomega.Succeed())
		written[k] = pa
	}
	return written
}

// ReportPart plays a cluster's agent reporting syncs for one part of a
// plan, as of the part's generation observed.
func ReportPart(g gomega.Gomega, c client.Client, pa *fleeetv1.ProxyAssemblage, observed int64, syncs ...fleeetv1.SyncStatus) {
	pa.Status.ObservedGeneration, pa.Status.Syncs = observed, syncs
	g.Expect(c.Status().Update(context.Background(), pa)).To(gomega.Succeed())
}

// WholePlan reads every part of the plan of Remote r from c and checks
// that it is whole (every part part 0 lists, at its revision, and no
// other), each part within limit bytes and fleeetv1.MaxSyncs syncs and
// controlled by the Remote. A part naming a CompiledPlan is returned as a
// copy holding its entries and the CompiledPlan's together
// (plancontent.Entries), as a plan whose agent reads no CompiledPlans holds
// them.
func WholePlan(g gomega.Gomega, c client.Client, r *fleeetv1.Remote, limit int) fleeetv1.ProxyPlan {
	list := &fleeetv1.ProxyAssemblageList{}
	g.ExpectWithOffset(1, c.List(context.Background(), list, client.InNamespace(r.Namespace))).To(gomega.Succeed())
	plan := fleeetv1.GroupProxyPlans(list.Items)[r.Name]
	g.ExpectWithOffset(1, plan).NotTo(gomega.BeEmpty())
	g.ExpectWithOffset(1, plan[0]).NotTo(gomega.BeNil(), "part 0")
	listed := plan[0].Spec.Assemblage.Parts
	g.ExpectWithOffset(1, plan).To(gomega.HaveLen(len(listed)+1), "only the parts part 0 lists")
	var further []*fleeetv1.AssemblageSpec
	for _, pa := range plan[1:] {
		g.ExpectWithOffset(1, pa).NotTo(gomega.BeNil(), "a listed part")
		further = append(further, &pa.Spec.Assemblage)
	}
	g.ExpectWithOffset(1, plan[0].Spec.Assemblage.Whole(further)).To(gomega.Succeed())
	for _, pa := range plan {
		g.ExpectWithOffset(1, compile.PlanBytes(&pa.Spec)).To(gomega.BeNumerically("<=", limit), pa.Name)
		g.ExpectWithOffset(1, len(pa.Spec.Assemblage.Syncs)).To(gomega.BeNumerically("<=", fleeetv1.MaxSyncs), pa.Name)
		g.ExpectWithOffset(1, metav1.IsControlledBy(pa, r)).To(gomega.BeTrue(), "%s controlled by its Remote", pa.Name)
	}
	for k, pa := range plan {
		if pa.Spec.CompiledPlan == "" {
			continue
		}
		entries, err := plancontent.Entries(context.Background(), pa, plancontent.From(c, pa.Namespace))
		g.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred())
		plan[k] = pa.DeepCopy()
		plan[k].Spec.Assemblage.Syncs, plan[k].Spec.CompiledPlan = entries, ""
	}
	return plan
}
