package manager_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// Stages of the staged-rollout benchmark: Remotes per stage, and the bake
// time of the two explicit stages.
const (
	benchCanaries  = 10
	benchEarly     = 30
	benchRest      = 60
	benchBake      = 2 * time.Second
	benchFailingOn = "rest-059"
)

// BenchmarkStagedRollout runs the fleet-manager binary against a fresh
// apiserver with 100 online pull Remotes in three stages (10 canaries, 30
// early, 60 rest; the first two bake 2 s each) and agents played by a
// reporter that answers every plan change at once, and reports: the time
// from a version change to every Remote Ready on it against the ideal (the
// sum of bake times), the manager's overhead per stage, and the time from a
// Remote's failure on the next version (in the last stage, so all 100 have
// moved) to the first and to every Remote's plan back on the good version.
func BenchmarkStagedRollout(b *testing.B) {
	bin := testenv.BuildCommand(b, "fleet-manager", "bench")
	for b.Loop() {
		benchStagedRollout(b, bin)
	}
}

func benchStagedRollout(b *testing.B, bin string) {
	c := testenv.StartCluster(b, "management", testenv.WithWebhooks())
	ctx := b.Context()
	ns := tenantIn(b, c)
	names := map[string]int{"canary": benchCanaries, "early": benchEarly, "rest": benchRest}
	var remotes []string
	for stage, n := range names {
		for i := range n {
			remotes = append(remotes, fmt.Sprintf("%s-%03d", stage, i))
		}
	}
	testenv.StartManagerProcess(b, bin, c, "--offline-grace=1h", "--kube-api-qps="+benchQPS, "--kube-api-burst="+benchBurst)
	parallel(b, len(remotes), func(i int) error {
		name := remotes[i]
		stage, _, _ := strings.Cut(name, "-")
		if err := c.Client.Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{"stage": stage}}}); err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		return c.Client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), RenewTime: &now}})
	})
	failed := make(chan time.Time, 1)
	startReporter(b, c, ns, failed)

	stage := func(name string, bake bool) fleeetv1.RolloutStage {
		st := fleeetv1.RolloutStage{Name: name, Selector: metav1.LabelSelector{MatchLabels: map[string]string{"stage": name}},
			MaxUnavailable: ptr.To(intstr.FromString("100%"))}
		if bake {
			st.PauseAfter = &metav1.Duration{Duration: benchBake}
		}
		return st
	}
	m := fleettest.NewModule("v1", &metav1.LabelSelector{})
	m.Namespace = ns
	m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, MaxUnavailable: ptr.To(intstr.FromString("100%")),
		OnFailure: fleeetv1.RollbackOnFailure, Stages: []fleeetv1.RolloutStage{stage("canary", true), stage("early", true)}}
	if err := c.Client.Create(ctx, m); err != nil {
		b.Fatal(err)
	}
	readyOn := func(tag string) func(*fleeetv1.ProxyAssemblage) bool {
		return func(pa *fleeetv1.ProxyAssemblage) bool {
			s := pa.ReportedSync("app")
			return fleettest.HeldTag(pa) == tag && s != nil && s.State == fleeetv1.SyncReady
		}
	}
	waitPlans(b, c, ns, len(remotes), readyOn("v1"))
	waitHistory(b, c, ns, "v1")

	setTag := func(tag string) {
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"sync":{"source":{"git":{"tag":%q}}}}}`, tag)))
		if err := c.Client.Patch(ctx, &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}, patch); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	setTag("v2")
	waitPlans(b, c, ns, len(remotes), readyOn("v2"))
	staged := time.Since(start)
	ideal := 2 * benchBake
	waitHistory(b, c, ns, "v2")

	setTag("v3") // fails on benchFailingOn, in the last stage
	var failedAt time.Time
	select {
	case failedAt = <-failed:
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
	// From the failure on, count Remotes whose plan went back to v2.
	var firstBack time.Duration
	back := map[string]bool{}
	testenv.WatchUntil(b, c, &fleeetv1.ProxyAssemblageList{}, ns, 5*time.Minute, "every plan back on v2", func(ev watch.Event) bool {
		pa, ok := ev.Object.(*fleeetv1.ProxyAssemblage)
		if !ok {
			return false
		}
		back[pa.Name] = fleettest.HeldTag(pa) == "v2"
		if back[pa.Name] && firstBack == 0 && ev.Type == watch.Modified {
			firstBack = time.Since(failedAt)
		}
		n := 0
		for _, ok := range back {
			if ok {
				n++
			}
		}
		return n == len(remotes)
	})
	rollback := time.Since(failedAt)

	b.ReportMetric(staged.Seconds(), "staged-rollout-s")
	b.ReportMetric(ideal.Seconds(), "ideal-s")
	b.ReportMetric((staged-ideal).Seconds()/3, "overhead-per-stage-s")
	b.ReportMetric(firstBack.Seconds(), "failure-to-first-back-s")
	b.ReportMetric(rollback.Seconds(), "failure-to-all-back-s")
}

// startReporter plays every Remote's agent: each plan change is reported
// at once, Ready, except v3 on benchFailingOn, reported Failed, the time of
// which it sends on failed. It writes as the manager process's user, which
// admission lets write any plan's status (the Remotes here were never
// registered, so they have no cluster identities of their own).
func startReporter(b *testing.B, c *testenv.Cluster, ns string, failed chan<- time.Time) {
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: testenv.AdminUser, Groups: []string{"system:masters"}}
	reporter, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	// An informer, not a bare watch: it resumes when the apiserver ends
	// the watch.
	plans, err := cache.New(c.Config, cache.Options{Scheme: testenv.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		b.Fatal(err)
	}
	informer, err := plans.GetInformer(b.Context(), &fleeetv1.ProxyAssemblage{})
	if err != nil {
		b.Fatal(err)
	}
	queue := make(chan string, 10000)
	changed := func(obj any) {
		if pa, ok := obj.(*fleeetv1.ProxyAssemblage); ok && pa.Status.ObservedGeneration != pa.Generation {
			queue <- pa.Name
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: changed, UpdateFunc: func(_, obj any) { changed(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = plans.Start(b.Context()) }()
	var once sync.Once
	for range 8 {
		go func() {
			for name := range queue { // never closed: the workers end with the process
				pa := &fleeetv1.ProxyAssemblage{}
				if err := reporter.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pa); err != nil || pa.Status.ObservedGeneration == pa.Generation {
					continue
				}
				state := fleeetv1.SyncReady
				if name == benchFailingOn && fleettest.HeldTag(pa) == "v3" {
					state = fleeetv1.SyncFailed
				}
				now := metav1.Now()
				pa.Status.ObservedGeneration = pa.Generation
				pa.Status.Syncs = nil
				for _, s := range pa.Spec.Assemblage.Syncs {
					pa.Status.Syncs = append(pa.Status.Syncs, fleeetv1.SyncStatus{Name: s.Name, State: state, LastTransitionTime: &now})
				}
				if err := reporter.Status().Update(context.Background(), pa); err != nil {
					queue <- name // a conflict: try again with what is there now
					continue
				}
				if state == fleeetv1.SyncFailed {
					once.Do(func() { failed <- time.Now() })
				}
			}
		}()
	}
}

// waitHistory waits until the Module's history records tag as Succeeded:
// the version a rollback returns to.
func waitHistory(b *testing.B, c *testenv.Cluster, ns, tag string) {
	testenv.WatchUntil(b, c, &fleeetv1.ModuleList{}, ns, 5*time.Minute, "history holding "+tag, func(ev watch.Event) bool {
		m, ok := ev.Object.(*fleeetv1.Module)
		return ok && len(m.Status.History) > 0 && m.Status.History[0].Version == tag && m.Status.History[0].Outcome == fleeetv1.RolloutSucceeded
	})
}
