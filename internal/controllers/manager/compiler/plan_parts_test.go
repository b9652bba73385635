package compiler_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// wholePlan reads every part of the plan of Remote r from the suite's
// apiserver (fleettest.WholePlan).
func wholePlan(g Gomega, r *fleeetv1.Remote) fleeetv1.ProxyPlan {
	return fleettest.WholePlan(g, cluster.Client, r, maxPlanBytes)
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

// A plan larger than one object is split over parts, each within the limit
// and every Module in (none left out); a version change rewrites only the
// part holding the sync and part 0; a sync grown out of its part moves while
// the others stay; and as the plan shrinks, a part is deleted only once part
// 0 no longer lists it, back to one object as before splitting.
func TestAPlanLargerThanOneObjectIsSplitOverParts(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	r := pullRemote(t, ns, "edge", nil)
	modules := map[string]*fleeetv1.Module{}
	for i := range 25 {
		name := fmt.Sprintf("app-%02d", i)
		modules[name] = fleettest.CreateModule(t, cluster.Client, ns, name, "v1.0.0", everyRemote, fleettest.Filler(1500))
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
	}, 2*time.Second, poll).Should(ConsistOf("edge", plan[len(plan)-1].Name))

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
}
