package fleettest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// Waits of the helpers that play clusters' agents.
const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
)

// Report plays a cluster's agent: it reports every sync of the Remote's
// current ProxyAssemblage spec in the given state.
func Report(g gomega.Gomega, c client.Client, ns, name string, state fleeetv1.SyncState) {
	g.Eventually(func() error {
		pa := Proxy(g, c, ns, name)
		now := metav1.Now()
		pa.Status.ObservedGeneration = pa.Generation
		pa.Status.Syncs = nil
		for _, s := range (&Contents{Reader: c}).Syncs(pa) {
			pa.Status.Syncs = append(pa.Status.Syncs, fleeetv1.SyncStatus{
				Name: s.Name, State: state, Message: "reported " + string(state), LastTransitionTime: &now})
		}
		return c.Status().Update(context.Background(), pa)
	}, timeout, poll).Should(gomega.Succeed())
}

// DriveHeld plays every online cluster's agent, reporting each Remote's
// plan in the state decide gives for what held says the plan holds ("" for
// nothing), until done holds. Each agent reads and reports its plan with
// the client agent returns for its Remote.
func DriveHeld(g gomega.Gomega, agent func(remote string) client.Client, ns string, online []string, held func(*fleeetv1.ProxyAssemblage) string,
	decide func(remote, tag string) fleeetv1.SyncState, done func(gomega.Gomega)) {
	g.Eventually(func(g gomega.Gomega) {
		for _, name := range online {
			c := agent(name)
			pa := Proxy(g, c, ns, name)
			tag := held(pa)
			state := decide(name, tag)
			reported := pa.Status.ObservedGeneration == pa.Generation && len(pa.Status.Syncs) == 1 &&
				pa.Status.Syncs[0].State == state
			if tag != "" && !reported {
				Report(g, c, ns, name, state)
			}
		}
		done(g)
	}, timeout, poll).Should(gomega.Succeed())
}

// OnPlans calls seen, from a watch until the test ends, with every
// ProxyAssemblage of a namespace as it is created or changed.
func OnPlans(t *testing.T, cfg *rest.Config, ns string, seen func(*fleeetv1.ProxyAssemblage)) {
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(t.Context(), &fleeetv1.ProxyAssemblageList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if pa, ok := ev.Object.(*fleeetv1.ProxyAssemblage); ok && ev.Type != watch.Deleted {
				seen(pa)
			}
		}
	}()
}

// RolloutWatch watches every ProxyAssemblage of a namespace for the whole
// test and records violations: more than maxUnavailable Remotes holding a
// version they have not reported Ready, or a Remote moving backward.
type RolloutWatch struct {
	mu         sync.Mutex
	order      map[string]int // tag → position in the sequence of versions
	online     map[string]bool
	held       map[string]string
	violations []string
	peak       int
}

// WatchRollout starts a RolloutWatch of ns, whose online Remotes are to
// move through tags in order, at most maxUnavailable of them unavailable at
// once.
func WatchRollout(t *testing.T, cfg *rest.Config, ns string, online []string, maxUnavailable int, tags ...string) *RolloutWatch {
	rw := &RolloutWatch{order: map[string]int{}, held: map[string]string{}, online: map[string]bool{}}
	for _, name := range online {
		rw.online[name] = true
	}
	for i, tag := range tags {
		rw.order[tag] = i
	}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	contents := &Contents{Reader: c}
	unready := map[string]bool{}
	OnPlans(t, cfg, ns, func(pa *fleeetv1.ProxyAssemblage) {
		rw.mu.Lock()
		defer rw.mu.Unlock()
		tag := contents.HeldTag(pa)
		if prev := rw.held[pa.Name]; prev != "" && rw.order[tag] < rw.order[prev] {
			rw.violations = append(rw.violations, fmt.Sprintf("%s moved back from %s to %s", pa.Name, prev, tag))
		}
		rw.held[pa.Name] = tag
		if !rw.online[pa.Name] {
			return // offline Remotes never count as unavailable
		}
		reported := pa.Status.ObservedGeneration == pa.Generation && len(pa.Status.Syncs) > 0 &&
			pa.Status.Syncs[0].State == fleeetv1.SyncReady
		unready[pa.Name] = tag != "" && !reported
		n := 0
		for _, u := range unready {
			if u {
				n++
			}
		}
		rw.peak = max(rw.peak, n)
		if n > maxUnavailable {
			rw.violations = append(rw.violations, fmt.Sprintf("%d Remotes unavailable at once", n))
		}
	})
	return rw
}

// Check fails g if the watch saw a violation.
func (rw *RolloutWatch) Check(g gomega.Gomega) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	g.Expect(rw.violations).To(gomega.BeEmpty())
}

// Peak is the most Remotes the watch saw unavailable at once.
func (rw *RolloutWatch) Peak() int {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.peak
}
