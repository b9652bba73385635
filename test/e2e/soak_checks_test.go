package e2e

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/demo"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// The soak's availability checks, on plans written by hand: a Remote counts
// as moving for a Module from when its plan takes a new sync of it while it
// was Ready, until it is Ready again; two at once for one Module break its
// maxUnavailable, and two Remotes at once, whichever Modules move them,
// the manager's --max-moving, while one Remote moving for both Modules is
// one move and an offline Remote counts for neither.
func TestSoakCountsMovesPerModuleAndAcrossModules(t *testing.T) {
	g := NewWithT(t)
	s := &soak{t: t, start: time.Now(), held: map[string]map[string]bool{}, moves: map[move]*moveState{}, offline: map[string]bool{}}
	contents := &fleettest.Contents{}
	plan := func(remote, backend, color string, ready ...string) {
		sync := func(name, value string) fleeetv1.NamedSync {
			return fleeetv1.NamedSync{Name: name, SyncSpec: fleeetv1.SyncSpec{Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "ssh://git/" + name, Tag: value}}}}
		}
		pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: remote}}
		pa.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{sync(demo.Backend, backend), sync(demo.Frontend, color)}
		for _, name := range ready {
			pa.Status.Syncs = append(pa.Status.Syncs, fleeetv1.SyncStatus{Name: name, State: fleeetv1.SyncReady})
		}
		s.seePlan(pa, contents)
	}
	for _, remote := range []string{"edge-1", "edge-2", "edge-3"} {
		plan(remote, "v1", "blue", demo.Backend, demo.Frontend)
	}
	g.Expect(s.violations).To(BeEmpty())

	plan("edge-1", "v2", "blue", demo.Frontend) // the backend moves on edge-1
	g.Expect(s.violations).To(BeEmpty(), "one Remote moving")
	plan("edge-1", "v2", "green") // and the frontend too
	g.Expect(s.violations).To(BeEmpty(), "one Remote moving for two Modules is one move")
	plan("edge-1", "v2", "green", demo.Frontend) // the frontend arrived on edge-1
	s.offline["edge-2"] = true
	plan("edge-2", "v1", "red", demo.Backend) // the frontend moves on an offline Remote
	g.Expect(s.violations).To(BeEmpty(), "an offline Remote counts for no budget")
	plan("edge-3", "v1", "red", demo.Backend) // and on an online one
	g.Expect(s.violations).To(ConsistOf(HaveSuffix("2 Remotes moving at once, all Modules together (the manager's --max-moving 1): edge-1, edge-3")))

	s.violations = nil
	plan("edge-1", "v2", "green", demo.Backend, demo.Frontend) // the backend arrived on edge-1
	g.Expect(s.violations).To(BeEmpty())
	s.offline["edge-2"] = false
	g.Expect(s.violations).To(BeEmpty())
	plan("edge-2", "v1", "red", demo.Backend) // edge-2 back, still moving
	g.Expect(s.violations).To(ContainElement(HaveSuffix("2 online clusters made unavailable by frontend's rollout at once (maxUnavailable 1): edge-2, edge-3")))
	g.Expect(s.plansSeen).To(Equal(10))
}
