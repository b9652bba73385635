package remote_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/delivery"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// wholePlan reads every part of the plan of Remote r from the suite's
// apiserver (wholePlanIn).
func wholePlan(g Gomega, r *fleeetv1.Remote) fleeetv1.ProxyPlan {
	return wholePlanIn(g, cluster.Client, r, maxPlanBytes)
}

// wholePlanIn reads every part of the plan of Remote r from c and checks
// that it is whole (every part part 0 lists, at its revision, and no
// other), each part within limit bytes and fleeetv1.MaxSyncs syncs and
// controlled by the Remote.
func wholePlanIn(g Gomega, c client.Client, r *fleeetv1.Remote, limit int) fleeetv1.ProxyPlan {
	list := &fleeetv1.ProxyAssemblageList{}
	g.ExpectWithOffset(1, c.List(context.Background(), list, client.InNamespace(r.Namespace))).To(Succeed())
	plan := fleeetv1.GroupProxyPlans(list.Items)[r.Name]
	g.ExpectWithOffset(1, plan).NotTo(BeEmpty())
	g.ExpectWithOffset(1, plan[0]).NotTo(BeNil(), "part 0")
	listed := plan[0].Spec.Assemblage.Parts
	g.ExpectWithOffset(1, plan).To(HaveLen(len(listed)+1), "only the parts part 0 lists")
	var further []*fleeetv1.AssemblageSpec
	for _, pa := range plan[1:] {
		g.ExpectWithOffset(1, pa).NotTo(BeNil(), "a listed part")
		further = append(further, &pa.Spec.Assemblage)
	}
	g.ExpectWithOffset(1, plan[0].Spec.Assemblage.Whole(further)).To(Succeed())
	for _, pa := range plan {
		g.ExpectWithOffset(1, compile.PlanBytes(&pa.Spec)).To(BeNumerically("<=", limit), pa.Name)
		g.ExpectWithOffset(1, len(pa.Spec.Assemblage.Syncs)).To(BeNumerically("<=", fleeetv1.MaxSyncs), pa.Name)
		g.ExpectWithOffset(1, metav1.IsControlledBy(pa, r)).To(BeTrue(), "%s controlled by its Remote", pa.Name)
	}
	return plan
}

// placement is the part of plan holding each sync, and its tag.
func placement(plan fleeetv1.ProxyPlan) (map[string]int, map[string]string) {
	parts, tags := map[string]int{}, map[string]string{}
	for k, pa := range plan {
		for _, s := range pa.Spec.Assemblage.Syncs {
			parts[s.Name], tags[s.Name] = k, s.Source.Git.Tag
		}
	}
	return parts, tags
}

// filler makes a Module's sync about size bytes.
func filler(size int) func(*fleeetv1.Module) {
	return func(m *fleeetv1.Module) {
		m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"filler": strings.Repeat("x", size)}
	}
}

// A plan larger than one object is split over parts, each within the limit
// and every Module in (none left out); a version change rewrites only the
// part holding the sync and part 0; a sync grown out of its part moves while
// the others stay; and as the plan shrinks, a part is deleted only once part
// 0 no longer lists it, back to one object as before splitting. The
// Remote's bundle delivers the Secrets of every part.
func TestAPlanLargerThanOneObjectIsSplitOverParts(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	r := pullRemote(t, ns, "edge", nil)
	newSecret(t, ns, "creds", "creds-value", offered, nil)
	modules := map[string]*fleeetv1.Module{}
	for i := range 25 {
		name := fmt.Sprintf("app-%02d", i)
		edit := filler(1500)
		if i == 24 { // the newest: in the last part
			edit = func(m *fleeetv1.Module) { filler(1500)(m); deliverSecrets("creds")(m) }
		}
		modules[name] = newModule(t, cluster.Client, ns, name, "v1.0.0", everyRemote, edit)
	}
	var plan fleeetv1.ProxyPlan
	g.Eventually(func(g Gomega) {
		plan = wholePlan(g, r)
		_, tags := placement(plan)
		g.Expect(tags).To(HaveLen(25))
		stamps := 0
		for k, pa := range plan {
			for name, stamp := range pa.CompiledSyncs() {
				g.Expect(stamp.TooLarge).To(BeEmpty(), name)
				g.Expect(plan.Holding(name)).To(Equal(pa), "%s stamped on part %d, the part holding it", name, k)
				stamps++
			}
		}
		g.Expect(stamps).To(Equal(25))
	}, timeout, poll).Should(Succeed())
	g.Expect(len(plan)).To(BeNumerically(">=", 3))
	// The Remote's bundle delivers what any part of its plan needs.
	g.Expect(plan.Holding("app-24")).NotTo(BeIdenticalTo(plan[0]))
	g.Eventually(func(g Gomega) map[string]delivery.Item { return bundleOf(g, ns, r.Name) }, timeout, poll).Should(HaveKey("creds"))

	// A version change of a Module in the last part.
	parts, _ := placement(plan)
	versions := map[string]string{}
	for _, pa := range plan {
		versions[pa.Name] = pa.ResourceVersion
	}
	moved := plan[len(plan)-1].Spec.Assemblage.Syncs[0].Name
	retag(t, modules[moved], "v1.0.1")
	g.Eventually(func(g Gomega) string {
		_, tags := placement(wholePlan(g, r))
		return tags[moved]
	}, timeout, poll).Should(Equal("v1.0.1"))
	g.Consistently(func(g Gomega) []string {
		var rewritten []string
		for _, pa := range wholePlan(g, r) {
			if pa.ResourceVersion != versions[pa.Name] {
				rewritten = append(rewritten, pa.Name)
			}
		}
		return rewritten
	}, grace, poll).Should(ConsistOf("edge", plan[len(plan)-1].Name))

	// A sync of part 0 grown out of it moves; the others stay where they are.
	grown := plan[0].Spec.Assemblage.Syncs[0].Name
	patch(t, modules[grown], `{"spec":{"sync":{"package":{"kustomize":{"substitute":{"more":%q}}}}}}`, strings.Repeat("y", 4000))
	g.Eventually(func(g Gomega) int {
		now, _ := placement(wholePlan(g, r))
		return now[grown]
	}, timeout, poll).ShouldNot(BeZero())
	now, _ := placement(wholePlan(g, r))
	for name, k := range parts {
		if name != grown {
			g.Expect(now[name]).To(Equal(k), "%s stays in its part", name)
		}
	}

	// Shrinking: a part is deleted only after part 0 stops listing it.
	wc, err := client.NewWithWatch(cluster.Config, client.Options{Scheme: testenv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(t.Context(), &fleeetv1.ProxyAssemblageList{}, client.InNamespace(ns))
	g.Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	listed, early := len(wholePlan(g, r))-1, []string{}
	var watched sync.WaitGroup
	watched.Go(func() {
		for ev := range w.ResultChan() {
			pa, ok := ev.Object.(*fleeetv1.ProxyAssemblage)
			if !ok {
				continue
			}
			_, k := fleeetv1.PlanOfPart(pa.Name)
			mu.Lock()
			switch {
			case k == 0 && ev.Type != watch.Deleted:
				listed = len(pa.Spec.Assemblage.Parts)
			case ev.Type == watch.Deleted && k <= listed:
				early = append(early, fmt.Sprintf("%s deleted while part 0 listed %d parts", pa.Name, listed))
			}
			mu.Unlock()
		}
	})
	for i := 5; i < 25; i++ {
		g.Expect(cluster.Client.Delete(t.Context(), modules[fmt.Sprintf("app-%02d", i)])).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		plan := wholePlan(g, r)
		g.Expect(plan).To(HaveLen(1))
		g.Expect(plan[0].Spec.Assemblage.Parts).To(BeEmpty())
		g.Expect(plan[0].Spec.Assemblage.PartRevision).To(BeEmpty())
		_, tags := placement(plan)
		g.Expect(tags).To(HaveLen(5))
	}, timeout, poll).Should(Succeed())
	w.Stop()
	watched.Wait()
	g.Expect(early).To(BeEmpty())
	g.Eventually(func(g Gomega) map[string]delivery.Item { return bundleOf(g, ns, r.Name) }, timeout, poll).Should(BeEmpty())
}
