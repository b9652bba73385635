package module

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func reconciler() *Reconciler { return &Reconciler{Recorder: events.NewFakeRecorder(100)} }

func rolling(maxUnavailable intstr.IntOrString, minReady int32) *fleeetv1.Module {
	return &fleeetv1.Module{Spec: fleeetv1.ModuleSpec{Rollout: fleeetv1.Rollout{
		Strategy: fleeetv1.RollingUpdateStrategy, MaxUnavailable: &maxUnavailable, MinReadySeconds: minReady,
	}}}
}

func TestStepAdmitsWithinMaxUnavailable(t *testing.T) {
	now := time.Now()
	long := now.Add(-time.Hour)
	ready := func(name string, updated bool) target {
		return target{name: name, holds: true, updated: updated, state: fleeetv1.SyncReady, since: long}
	}
	cases := []struct {
		name     string
		module   *fleeetv1.Module
		targets  []target
		previous []string
		admitted []string
		paused   string
	}{{
		name:     "one at a time from a steady fleet",
		module:   rolling(intstr.FromInt32(1), 0),
		targets:  []target{ready("a", false), ready("b", false), ready("c", false)},
		admitted: []string{"a"},
	}, {
		name:     "an admitted Remote still moving uses the budget",
		module:   rolling(intstr.FromInt32(1), 0),
		targets:  []target{ready("a", false), ready("b", false)},
		previous: []string{"b"},
		admitted: []string{"b"},
	}, {
		name:   "updated but not yet Ready uses the budget",
		module: rolling(intstr.FromInt32(1), 0),
		targets: []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncProgressing},
			ready("b", false)},
	}, {
		name:     "percent rounds down but never below one",
		module:   rolling(intstr.FromString("50%"), 0),
		targets:  []target{ready("a", false), ready("b", false), ready("c", false)},
		admitted: []string{"a"},
	}, {
		name:     "Ready within minReadySeconds is still unavailable",
		module:   rolling(intstr.FromInt32(1), 60),
		targets:  []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncReady, since: now}, ready("b", false)},
		admitted: nil,
	}, {
		name:   "a Remote already unavailable on the old version moves at no cost",
		module: rolling(intstr.FromInt32(1), 0),
		targets: []target{{name: "a", holds: true, state: fleeetv1.SyncProgressing},
			ready("b", false), ready("c", false)},
		admitted: []string{"a"},
	}, {
		name:   "offline Remotes wait until every online one is done",
		module: rolling(intstr.FromInt32(1), 0),
		targets: []target{ready("a", true), {name: "z", offline: true, holds: true},
			ready("b", false)},
		admitted: []string{"b"},
	}, {
		name:   "a Remote gone offline while moving keeps its place",
		module: rolling(intstr.FromInt32(1), 0),
		targets: []target{{name: "a", offline: true, holds: true, updated: true, state: fleeetv1.SyncProgressing},
			ready("b", false)},
		admitted: nil,
	}, {
		name:     "a Remote gone offline after it arrived frees its place",
		module:   rolling(intstr.FromInt32(1), 0),
		targets:  []target{{name: "a", offline: true, holds: true, updated: true, state: fleeetv1.SyncReady, since: long}, ready("b", false)},
		admitted: []string{"b"},
	}, {
		name:     "offline Remotes are not admitted while offline",
		module:   rolling(intstr.FromInt32(1), 0),
		targets:  []target{ready("a", true), {name: "y", offline: true, holds: true}, {name: "z", offline: true, holds: true}},
		admitted: nil,
	}, {
		name:     "Remotes back online move within maxUnavailable",
		module:   rolling(intstr.FromInt32(1), 0),
		targets:  []target{ready("a", true), ready("y", false), ready("z", false)},
		admitted: []string{"y"},
	}, {
		name:   "suspended Remotes wait like offline ones and never pause the rollout",
		module: rolling(intstr.FromInt32(1), 0),
		targets: []target{ready("a", true), {name: "s", suspended: true, holds: true, updated: true, state: fleeetv1.SyncFailed},
			{name: "t", suspended: true, holds: true}, ready("b", false)},
		admitted: []string{"b"},
	}, {
		name:     "a failed updated Remote pauses everything",
		module:   rolling(intstr.FromInt32(2), 0),
		targets:  []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncFailed}, ready("b", false)},
		previous: []string{"b"},
		paused:   "a",
	}, {
		name:     "a failure within maxFailures counts as done",
		module:   withMaxFailures(rolling(intstr.FromInt32(1), 0), intstr.FromInt32(1)),
		targets:  []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncFailed}, ready("b", false)},
		admitted: []string{"b"},
	}, {
		name:   "past the progress deadline is a failure",
		module: withDeadline(rolling(intstr.FromInt32(1), 0), 60),
		targets: []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncProgressing, since: now.Add(-2 * time.Minute)},
			ready("b", false)},
		paused: "a",
	}, {
		name:   "within the progress deadline is still moving",
		module: withDeadline(rolling(intstr.FromInt32(1), 0), 60),
		targets: []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncProgressing, since: now.Add(-30 * time.Second)},
			ready("b", false)},
	}, {
		name:   "Ready with pods not ready is not available",
		module: rolling(intstr.FromInt32(1), 0),
		targets: []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncReady, since: long,
			health: &fleeetv1.WorkloadHealth{Workloads: 1, ReadyPods: 0, DesiredPods: 1}}, ready("b", false)},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := decide(tc.module, tc.targets, &fleeetv1.RolloutStatus{Admitted: tc.previous}, unlimited, now)
			g.Expect(p.admitted).To(Equal(tc.admitted))
			g.Expect(p.failing).To(Equal(tc.paused != ""))
			if tc.paused != "" {
				g.Expect(p.failed[0].name).To(Equal(tc.paused))
			}
		})
	}
}

func withMaxFailures(m *fleeetv1.Module, v intstr.IntOrString) *fleeetv1.Module {
	m.Spec.Rollout.MaxFailures = &v
	return m
}

func withDeadline(m *fleeetv1.Module, seconds int32) *fleeetv1.Module {
	m.Spec.Rollout.ProgressDeadlineSeconds = seconds
	return m
}

func TestScaledRoundsDown(t *testing.T) {
	g := NewWithT(t)
	g.Expect(scaled(nil, 10, 1)).To(Equal(1))
	g.Expect(scaled(ptr.To(intstr.FromInt32(3)), 10, 1)).To(Equal(3))
	g.Expect(scaled(ptr.To(intstr.FromString("25%")), 10, 1)).To(Equal(2))
	g.Expect(scaled(ptr.To(intstr.FromString("1%")), 10, 1)).To(Equal(0))
	g.Expect(scaled(ptr.To(intstr.FromString("100%")), 7, 1)).To(Equal(7))
	g.Expect(scaled(ptr.To(intstr.FromString("x%")), 7, 2)).To(Equal(2))
}

func TestAPauseHoldsUntilTheRemoteIsRepaired(t *testing.T) {
	now := time.Now()
	m := rolling(intstr.FromInt32(1), 30)
	m.Status.Rollout = &fleeetv1.RolloutStatus{Revision: "r3", PausedBy: "a"}
	waiting := target{name: "b", holds: true, state: fleeetv1.SyncReady, since: now.Add(-time.Hour)}
	cases := []struct {
		name   string
		a      []target
		paused string
	}{
		{"still progressing after the failure", []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncProgressing}}, "a"},
		{"offline, so nobody knows", []target{{name: "a", offline: true, holds: true, updated: true, state: fleeetv1.SyncFailed}}, "a"},
		{"Ready but not for minReadySeconds yet", []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncReady, since: now.Add(-10 * time.Second)}}, "a"},
		{"Ready for minReadySeconds", []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncReady, since: now.Add(-time.Minute)}}, ""},
		{"no longer selected", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			m := m.DeepCopy()
			reconciler().reconcileRollout(events.NewFakeRecorder(100), m, "r3", append(tc.a, waiting), unlimited, now)
			g.Expect(m.Status.Rollout.PausedBy).To(Equal(tc.paused))
			if tc.paused == "" {
				g.Expect(m.Status.Rollout.Admitted).To(ContainElement("b"), "the rollout goes on")
			} else {
				g.Expect(m.Status.Rollout.Admitted).To(BeEmpty())
			}
		})
	}
}

// Remotes that run the current version with pods not ready are counted, and
// the Module's conditions say why for the first of them: a failing one's
// pause names the crash, a Ready one's progress the pods short.
// Every Remote reporting drift in the Module's sync counts, whether or not
// it runs the current version yet: its objects were changed all the same.
func TestDriftReachesTheModuleSummary(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	long := now.Add(-time.Hour)
	m := rolling(intstr.FromInt32(1), 0)
	m.Generation, m.Status.Version = 2, "v2"
	targets := []target{
		{name: "corrected", holds: true, updated: true, state: fleeetv1.SyncReady, since: long,
			drift: &fleeetv1.SyncDrift{Detected: 1, Corrected: 1}},
		{name: "warned", holds: true, updated: false, state: fleeetv1.SyncReady, since: long,
			drift: &fleeetv1.SyncDrift{Detected: 1, Drifted: true}},
		{name: "clean", holds: true, updated: true, state: fleeetv1.SyncReady, since: long, drift: &fleeetv1.SyncDrift{}},
		{name: "unreported", holds: true, updated: true, state: fleeetv1.SyncReady, since: long},
	}
	p := decide(m, targets, &fleeetv1.RolloutStatus{}, unlimited, now)
	g.Expect(p.summary.Drifted).To(Equal(int32(2)))
}

func TestWorkloadHealthReachesTheModuleSummary(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	long := now.Add(-time.Hour)
	crashing := &fleeetv1.WorkloadHealth{Workloads: 1, DesiredPods: 2, Reason: "CrashLoopBackOff",
		Message: "Deployment web: pod web-1: container app"}
	healthy := &fleeetv1.WorkloadHealth{Workloads: 1, ReadyPods: 2, DesiredPods: 2}
	short := &fleeetv1.WorkloadHealth{Workloads: 1, ReadyPods: 1, DesiredPods: 2, Reason: "ReadinessProbeFailing",
		Message: "Deployment web: pod web-2: container app"}
	m := rolling(intstr.FromInt32(1), 0)
	m.Generation, m.Status.Version = 2, "v2"
	targets := []target{
		{name: "a", holds: true, updated: true, state: fleeetv1.SyncReady, since: long, health: healthy},
		{name: "b", holds: true, updated: true, state: fleeetv1.SyncReady, since: long, health: short},
		{name: "c", holds: true, updated: false, state: fleeetv1.SyncReady, since: long, health: crashing},
	}
	p := decide(m, targets, &fleeetv1.RolloutStatus{}, unlimited, now)
	g.Expect(p.summary.PodsNotReady).To(Equal(int32(1)), "only Remotes at the current version count")
	r := reconciler()
	r.reconcileStatus(m, p, compileNotes{})
	ready := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.ReadyCondition)
	g.Expect(ready.Message).To(HaveSuffix("; pods not ready on 1: Remote b reports 1/2 pods ready: " +
		"ReadinessProbeFailing (Deployment web: pod web-2: container app)"))

	targets[2].updated, targets[2].state, targets[2].message = true, fleeetv1.SyncFailed, "health check failed"
	m.Status.Rollout = &fleeetv1.RolloutStatus{Revision: "r2"}
	p = r.reconcileRollout(r.Recorder, m, "r2", targets, unlimited, now)
	r.reconcileStatus(m, p, compileNotes{})
	g.Expect(m.Status.Summary.PodsNotReady).To(Equal(int32(2)))
	paused := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)
	g.Expect(paused).NotTo(BeNil())
	g.Expect(paused.Message).To(HavePrefix("Remote c failed on v2: health check failed; workloads: " +
		"0/2 pods ready: CrashLoopBackOff (Deployment web: pod web-1: container app); repair it"))
}
