package module

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/rollout/window"
)

// staged is a rolling update in the given stages, one Remote at a time.
func staged(stages ...fleeetv1.RolloutStage) *fleeetv1.Module {
	m := rolling(intstr.FromInt32(1), 0)
	m.Spec.Rollout.Stages = stages
	return m
}

func TestStagesGoInOrder(t *testing.T) {
	now := time.Now()
	long := now.Add(-time.Hour)
	old := func(name string, stage int) target {
		return target{name: name, stage: stage, holds: true, state: fleeetv1.SyncReady, since: long}
	}
	done := func(name string, stage int, since time.Time) target {
		return target{name: name, stage: stage, holds: true, updated: true, state: fleeetv1.SyncReady, since: since}
	}
	canary := fleeetv1.RolloutStage{Name: "canary"}
	baking := fleeetv1.RolloutStage{Name: "canary", PauseAfter: &metav1.Duration{Duration: 10 * time.Minute}}
	manual := fleeetv1.RolloutStage{Name: "canary", Approval: fleeetv1.ManualApproval}
	wide := fleeetv1.RolloutStage{Name: "wide", MaxUnavailable: ptr.To(intstr.FromString("100%"))}
	cases := []struct {
		name     string
		module   *fleeetv1.Module
		targets  []target
		previous fleeetv1.RolloutStatus
		admitted []string
		stage    string
		holding  string
	}{{
		name:     "the first stage moves first, whatever the names",
		module:   staged(canary),
		targets:  []target{old("a", 1), old("z", 0)},
		admitted: []string{"z"},
		stage:    "canary",
	}, {
		name:     "the next stage waits while the stage has a Remote moving",
		module:   staged(canary),
		targets:  []target{old("a", 1), {name: "y", stage: 0, holds: true, updated: true, state: fleeetv1.SyncProgressing}, old("z", 0)},
		stage:    "canary",
		admitted: nil,
	}, {
		name:     "a done stage starts the next, with its own maxUnavailable",
		module:   staged(canary, wide),
		targets:  []target{old("a", 1), old("b", 1), old("c", 2), done("z", 0, long)},
		admitted: []string{"a", "b"},
		stage:    "wide",
	}, {
		name:     "an offline Remote never holds its stage up and is not admitted while offline",
		module:   staged(canary),
		targets:  []target{old("a", 1), done("y", 0, long), {name: "z", stage: 0, offline: true, holds: true}},
		admitted: []string{"a"},
		stage:    "",
	}, {
		name:     "a Remote back in a done stage moves before the next stage admits anyone new",
		module:   staged(canary),
		targets:  []target{old("a", 1), done("y", 0, long), old("z", 0)},
		admitted: []string{"z"},
		stage:    "canary",
	}, {
		name:    "a done stage bakes for pauseAfter from its last Ready",
		module:  staged(baking),
		targets: []target{old("a", 1), done("y", 0, long), done("z", 0, now.Add(-time.Minute))},
		stage:   "canary",
		holding: "stage canary bakes until " + now.Add(9*time.Minute).UTC().Format(time.RFC3339),
	}, {
		name:     "a baked stage starts the next",
		module:   staged(baking),
		targets:  []target{old("a", 1), done("z", 0, now.Add(-11*time.Minute))},
		admitted: []string{"a"},
	}, {
		name:    "a manual stage holds the next until approved",
		module:  staged(manual),
		targets: []target{old("a", 1), done("z", 0, long)},
		stage:   "canary",
		holding: "stage canary awaits approval (fleetctl rollout approve)",
	}, {
		name:     "an approved stage starts the next",
		module:   staged(manual),
		targets:  []target{old("a", 1), done("z", 0, long)},
		previous: fleeetv1.RolloutStatus{Approved: []string{"canary"}},
		admitted: []string{"a"},
	}, {
		name:     "the last stage needs no approval",
		module:   staged(canary, fleeetv1.RolloutStage{Name: "last", Approval: fleeetv1.ManualApproval}),
		targets:  []target{done("z", 0, long), done("y", 1, long)},
		stage:    "last",
		admitted: nil,
	}, {
		name:     "an empty stage is skipped",
		module:   staged(canary, manual), // both named canary in spirit: the first has no Remote
		targets:  []target{old("a", 2)},
		admitted: []string{"a"},
	}, {
		name:     "paused admits nothing new, and what moves goes on",
		module:   func() *fleeetv1.Module { m := staged(wide); m.Spec.Rollout.Paused = true; return m }(),
		targets:  []target{old("a", 0), old("b", 0), old("c", 0)},
		previous: fleeetv1.RolloutStatus{Admitted: []string{"b"}},
		admitted: []string{"b"},
		stage:    "wide",
		holding:  "paused by spec.rollout.paused (set it to false where the spec is kept)",
	}, {
		name: "the pause annotation pauses the same way, whatever the spec says",
		module: func() *fleeetv1.Module {
			m := staged(wide)
			m.Name, m.Annotations = "app", map[string]string{fleeetv1.PauseAnnotation: "2026-11-25T23:00:00Z: freeze"}
			return m
		}(),
		targets:  []target{old("a", 0), old("b", 0), old("c", 0)},
		previous: fleeetv1.RolloutStatus{Admitted: []string{"b"}},
		admitted: []string{"b"},
		stage:    "wide",
		holding:  `paused by annotation fleeet.dev/pause "2026-11-25T23:00:00Z: freeze" (fleetctl rollout resume app removes it)`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := decide(tc.module, tc.targets, &tc.previous, unlimited, now)
			g.Expect(p.admitted).To(Equal(tc.admitted))
			if tc.stage != "" {
				g.Expect(p.stage).To(Equal(tc.stage))
			}
			g.Expect(p.holding).To(Equal(tc.holding))
		})
	}
}

// TestRolloutPropertiesOverRandomFleets drives random fleets through random
// staged rollouts, admitted Remotes moving and becoming Ready or failing at
// random, and checks at every step: no stage has more Remotes moving than
// its bound nor more than the fleet-wide budget, no Remote moves before
// every earlier stage of its track is done (every declared stage, for one
// in none), and nothing moves once the rollout is failing.
func TestRolloutPropertiesOverRandomFleets(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		m := rolling(intstr.FromInt32(int32(1+rng.IntN(3))), int32(rng.IntN(3)))
		for i := range rng.IntN(4) {
			st := fleeetv1.RolloutStage{Name: fmt.Sprintf("s%d", i)}
			if rng.IntN(2) == 0 {
				st.MaxUnavailable = ptr.To(intstr.FromString(fmt.Sprintf("%d%%", 1+rng.IntN(100))))
			}
			if rng.IntN(3) == 0 {
				st.PauseAfter = &metav1.Duration{Duration: time.Duration(rng.IntN(10)) * time.Second}
			}
			if rng.IntN(3) == 0 {
				st.Approval = fleeetv1.ManualApproval
			}
			st.Track = []string{"", "", "eu", "us"}[rng.IntN(4)]
			m.Spec.Rollout.Stages = append(m.Spec.Rollout.Stages, st)
		}
		if rng.IntN(2) == 0 {
			m.Spec.Rollout.MaxFailures = ptr.To(intstr.FromInt32(int32(rng.IntN(3))))
		}
		lim := unlimited
		if rng.IntN(2) == 0 {
			lim = limits{budget: 1 + rng.IntN(3), budgetCap: 5, budgetOf: "the namespace's"}
		}
		now := time.Unix(1_000_000, 0)
		targets := make([]target, 1+rng.IntN(40))
		failsOnNew := map[string]bool{}
		for i := range targets {
			name := fmt.Sprintf("r%02d", i)
			targets[i] = target{name: name, stage: rng.IntN(len(m.Spec.Rollout.Stages) + 1), offline: rng.IntN(10) == 0,
				holds: true, state: fleeetv1.SyncReady, since: now.Add(-time.Hour)}
			failsOnNew[name] = rng.IntN(15) == 0
		}
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			g := NewWithT(t)
			status := &fleeetv1.RolloutStatus{}
			back := rng.IntN(60)
			for tick := 0; ; tick++ {
				g.Expect(tick).To(BeNumerically("<", 2000), "the rollout ends")
				p := decide(m, targets, status, lim, now)
				checkBounds(g, m, targets, p, now)
				if lim.budget >= 0 {
					g.Expect(p.moving).To(BeNumerically("<=", lim.budget), "never more moving than the budget")
				}
				if p.failing {
					g.Expect(p.admitted).To(BeEmpty(), "nothing moves once the rollout is failing")
					return
				}
				if p.waiting == len(p.failed) {
					for _, t := range targets {
						g.Expect(t.updated || t.offline).To(BeTrue(), "Remote %s ends updated", t.name)
					}
					return
				}
				status.Approved = append(status.Approved, p.awaiting...)
				status.Admitted = p.admitted
				now = now.Add(time.Second)
				for i := range targets {
					t := &targets[i]
					switch {
					case t.offline:
						// All back at once, as after an outage, to move
						// within the bounds.
						t.offline = tick < back
					case !t.updated && slices.Contains(p.admitted, t.name):
						t.updated, t.state, t.since = true, fleeetv1.SyncProgressing, now
					case t.updated && t.state == fleeetv1.SyncProgressing && rng.IntN(2) == 0:
						t.state, t.since = fleeetv1.SyncReady, now
						if failsOnNew[t.name] {
							t.state = fleeetv1.SyncFailed
						}
					}
				}
			}
		})
	}
}

// checkBounds checks one step's admissions against the stages' bounds and
// order.
func checkBounds(g Gomega, m *fleeetv1.Module, targets []target, p decision, now time.Time) {
	minReady := time.Duration(m.Spec.Rollout.MinReadySeconds) * time.Second
	moving := map[int]int{}
	sizes := map[int]int{}
	for _, t := range targets {
		sizes[t.stage]++
		if t.away() {
			continue
		}
		if (t.updated && !t.available(now, minReady) && !t.failed(now, 0)) || (!t.updated && slices.Contains(p.admitted, t.name)) {
			moving[t.stage]++
		}
	}
	for stage, n := range moving {
		limit := m.Spec.Rollout.MaxUnavailable
		if stage < len(m.Spec.Rollout.Stages) && m.Spec.Rollout.Stages[stage].MaxUnavailable != nil {
			limit = m.Spec.Rollout.Stages[stage].MaxUnavailable
		}
		g.Expect(n).To(BeNumerically("<=", max(1, scaled(limit, sizes[stage], 1))), "Remotes moving in stage %d", stage)
	}
	stages := m.Spec.Rollout.Stages
	// before reports whether stage a goes before stage b: earlier in the
	// same track, or any declared stage before the Remotes in none.
	before := func(a, b int) bool {
		return a < b && (b == len(stages) || stages[a].Track == stages[b].Track)
	}
	for _, name := range p.admitted {
		i := slices.IndexFunc(targets, func(t target) bool { return t.name == name })
		for _, earlier := range targets {
			if before(earlier.stage, targets[i].stage) && !earlier.away() {
				g.Expect(earlier.updated && (earlier.available(now, minReady) || earlier.failed(now, 0))).To(BeTrue(),
					"%s (stage %d) admitted before %s (stage %d) is done", name, targets[i].stage, earlier.name, earlier.stage)
			}
		}
	}
}

func TestARollbackReturnsToTheLastGoodVersionAndHolds(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	m := rolling(intstr.FromInt32(1), 0)
	m.Spec.Rollout.OnFailure = fleeetv1.RollbackOnFailure
	m.Status.Version = "v3"
	m.Status.History = []fleeetv1.RolloutRecord{
		{Revision: "r2", Version: "v2", Outcome: fleeetv1.RolloutRolledBack},
		{Revision: "r1", Version: "v1", Outcome: fleeetv1.RolloutSucceeded},
	}
	failing := []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncFailed, message: "health check failed"},
		{name: "b", holds: true, state: fleeetv1.SyncReady, since: now.Add(-time.Hour)}}
	r := reconciler()
	p := r.reconcileRollout(r.Recorder, m, "r3", failing, unlimited, now)
	r.reconcileStatus(m, p, compileNotes{})
	r.recordHistory(m, "r3", p, now)
	g.Expect(m.Status.Rollout.RolledBack).To(Equal(&fleeetv1.Rollback{To: "r1", Version: "v1", Remote: "a",
		Message: "Remote a failed: health check failed", Time: metav1.NewTime(now)}))
	g.Expect(m.Status.Rollout.Admitted).To(BeEmpty())
	rolledBack := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolledBackCondition)
	g.Expect(rolledBack).NotTo(BeNil())
	g.Expect(rolledBack.Message).To(HavePrefix("v3 rolled back to v1 ("))
	g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.StalledCondition)).To(BeTrue())
	g.Expect(m.Status.History[0].Revision).To(Equal("r3"))
	g.Expect(m.Status.History[0].Outcome).To(Equal(fleeetv1.RolloutRolledBack))

	// Repaired or not, it holds until the revision changes.
	healthy := []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncReady, since: now.Add(-time.Hour)},
		{name: "b", holds: true, updated: true, state: fleeetv1.SyncReady, since: now.Add(-time.Hour)}}
	r.reconcileRollout(r.Recorder, m, "r3", healthy, unlimited, now)
	g.Expect(m.Status.Rollout.RolledBack).NotTo(BeNil())
	r.reconcileRollout(r.Recorder, m, "r4", failing[1:], unlimited, now)
	g.Expect(m.Status.Rollout.RolledBack).To(BeNil(), "a new revision rolls out afresh")
	g.Expect(m.Status.Rollout.Admitted).To(Equal([]string{"b"}))
}

func TestAFailureWithNothingToRollBackToPauses(t *testing.T) {
	g := NewWithT(t)
	m := rolling(intstr.FromInt32(1), 0)
	m.Spec.Rollout.OnFailure = fleeetv1.RollbackOnFailure
	r := reconciler()
	p := r.reconcileRollout(r.Recorder, m, "r1", []target{{name: "a", holds: true, updated: true, state: fleeetv1.SyncFailed}}, unlimited, time.Now())
	r.reconcileStatus(m, p, compileNotes{})
	g.Expect(m.Status.Rollout.RolledBack).To(BeNil())
	g.Expect(m.Status.Rollout.PausedBy).To(Equal("a"))
	paused := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)
	g.Expect(paused.Reason).To(Equal(fleeetv1.ReasonNothingToRollBackTo))
}

func TestUndoAndApproveApplyOnlyToTheirRevision(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	long := now.Add(-time.Hour)
	m := staged(fleeetv1.RolloutStage{Name: "canary", Approval: fleeetv1.ManualApproval})
	m.Status.History = []fleeetv1.RolloutRecord{{Revision: "r1", Version: "v1", Outcome: fleeetv1.RolloutSucceeded}}
	targets := []target{{name: "a", stage: 1, holds: true, state: fleeetv1.SyncReady, since: long},
		{name: "z", stage: 0, holds: true, updated: true, state: fleeetv1.SyncReady, since: long}}
	r := reconciler()
	m.Annotations = map[string]string{fleeetv1.ApproveAnnotation: "r1/canary", fleeetv1.UndoAnnotation: "r1"}
	r.reconcileRollout(r.Recorder, m, "r2", targets, unlimited, now)
	g.Expect(m.Status.Rollout.Holding).To(ContainSubstring("awaits approval"), "an approval of another revision")
	g.Expect(m.Status.Rollout.RolledBack).To(BeNil(), "an undo of another revision")

	m.Annotations[fleeetv1.ApproveAnnotation] = "r2/canary"
	r.reconcileRollout(r.Recorder, m, "r2", targets, unlimited, now)
	g.Expect(m.Status.Rollout.Approved).To(Equal([]string{"canary"}))
	g.Expect(m.Status.Rollout.Admitted).To(Equal([]string{"a"}), "the next stage starts at once")

	m.Annotations[fleeetv1.UndoAnnotation] = "r2"
	r.reconcileRollout(r.Recorder, m, "r2", targets, unlimited, now)
	g.Expect(m.Status.Rollout.RolledBack).NotTo(BeNil())
	g.Expect(m.Status.Rollout.RolledBack.Message).To(Equal("fleetctl rollout undo"))
	g.Expect(m.Status.Rollout.RolledBack.To).To(Equal("r1"))
}

func TestHistoryKeepsItsLimitAndTheNewestGoodVersion(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	m := rolling(intstr.FromInt32(1), 0)
	m.Spec.Rollout.HistoryLimit = 2
	m.Status.History = []fleeetv1.RolloutRecord{
		{Revision: "r3", Outcome: fleeetv1.RolloutRolledBack},
		{Revision: "r1", Outcome: fleeetv1.RolloutSucceeded},
	}
	m.Status.Rollout = &fleeetv1.RolloutStatus{Revision: "r4", RolledBack: &fleeetv1.Rollback{To: "r1"}}
	reconciler().recordHistory(m, "r4", decision{}, now)
	g.Expect(m.Status.History).To(HaveLen(2))
	g.Expect(m.Status.History[0].Revision).To(Equal("r4"))
	g.Expect(m.Status.History[1].Revision).To(Equal("r1"), "the version rolled back to stays")

	m.Status.Rollout = nil
	ready := decision{summary: fleeetv1.ModuleSummary{Total: 1, Updated: 1, Ready: 1}}
	reconciler().recordHistory(m, "r5", ready, now)
	g.Expect(m.Status.History[0].Revision).To(Equal("r5"))
	g.Expect(m.Status.History[0].Outcome).To(Equal(fleeetv1.RolloutSucceeded))
	reconciler().recordHistory(m, "r6", decision{waiting: 1, summary: ready.summary}, now)
	g.Expect(m.Status.History[0].Revision).To(Equal("r5"), "a version still rolling out is not history yet")
}

// unlimited is a rollout with no windows and no budget.
var unlimited = limits{budget: -1}

func TestWindowsAndTheBudgetHoldOnlyWhatHasNotStarted(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	long := now.Add(-time.Hour)
	old := func(name string) target {
		return target{name: name, holds: true, state: fleeetv1.SyncReady, since: long}
	}
	nightly, problems := window.Parse([]fleeetv1.RolloutWindow{{Schedule: "0 22 * * *", Duration: metav1.Duration{Duration: 4 * time.Hour}}})
	never, more := window.Parse([]fleeetv1.RolloutWindow{{Schedule: "0 0 30 2 *", Duration: metav1.Duration{Duration: 24 * time.Hour}}})
	if problems = append(problems, more...); len(problems) > 0 {
		t.Fatal(window.Describe(problems))
	}
	three := rolling(intstr.FromInt32(3), 0)
	cases := []struct {
		name     string
		lim      limits
		previous []string
		admitted []string
		moving   int
		holding  string
	}{{
		name:     "outside its windows nothing new starts; what was admitted goes on",
		lim:      limits{windows: nightly, budget: -1},
		previous: []string{"a"},
		admitted: []string{"a"},
		moving:   1,
		holding:  "outside its deployment windows until 2026-11-23T22:00:00Z",
	}, {
		name:     "a window that never opens holds everything not started",
		lim:      limits{windows: never, budget: -1},
		previous: []string{"a"},
		admitted: []string{"a"},
		moving:   1,
		holding: "outside its deployment windows, none of which opens again: " +
			`spec.rollout.windows[0].schedule: "0 0 30 2 *" never opens (no time matches it in the next five years)`,
	}, {
		name:     "the budget caps what starts",
		lim:      limits{budget: 2, budgetCap: 5, budgetOf: "the namespace's"},
		admitted: []string{"a", "b"},
		moving:   2,
	}, {
		name:     "a used-up budget holds the rollout and says whose it is",
		lim:      limits{budget: 1, budgetCap: 5, budgetOf: "the manager's"},
		previous: []string{"a"},
		admitted: []string{"a"},
		moving:   1,
		holding:  "the manager's budget is used up: 5 Remotes moving at most, 4 of them for other Modules",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := decide(three, []target{old("a"), old("b"), old("c")}, &fleeetv1.RolloutStatus{Admitted: tc.previous}, tc.lim, now)
			g.Expect(p.admitted).To(Equal(tc.admitted))
			g.Expect(p.moving).To(Equal(tc.moving))
			g.Expect(p.holding).To(Equal(tc.holding))
		})
	}
}

// A rollout whose windows never open is Stalled, naming the schedule, not
// Progressing for ever.
func TestARolloutWhoseWindowsNeverOpenIsStalled(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	never, problems := window.Parse([]fleeetv1.RolloutWindow{{Schedule: "0 0 30 2 *", Duration: metav1.Duration{Duration: time.Hour}}})
	g.Expect(problems).To(BeEmpty())
	m := rolling(intstr.FromInt32(1), 0)
	r := reconciler()
	p := r.reconcileRollout(r.Recorder, m, "r1", []target{{name: "a", holds: true, state: fleeetv1.SyncReady, since: now.Add(-time.Hour)}},
		limits{windows: never, budget: -1}, now)
	g.Expect(m.Status.Rollout.Admitted).To(BeEmpty())
	r.reconcileStatus(m, p, compileNotes{})
	stalled := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.StalledCondition)
	g.Expect(stalled).NotTo(BeNil())
	g.Expect(stalled.Reason).To(Equal(fleeetv1.ReasonWindowNeverOpens))
	g.Expect(stalled.Message).To(ContainSubstring(`spec.rollout.windows[0].schedule: "0 0 30 2 *" never opens`))
}

// An approval or undo that does nothing says why in a Warning event, once
// per value however often the Module reconciles; one that approves, or was
// used already, says nothing.
func TestAnApprovalThatApprovesNothingIsReportedOnce(t *testing.T) {
	now := time.Now()
	long := now.Add(-time.Hour)
	targets := []target{{name: "a", stage: 1, holds: true, state: fleeetv1.SyncReady, since: long},
		{name: "z", stage: 0, holds: true, updated: true, state: fleeetv1.SyncReady, since: long}}
	cases := []struct {
		annotation, value, want string
	}{
		{fleeetv1.ApproveAnnotation, "r2/wide", `fleeet.dev/approve "r2/wide" names stage wide, which is not awaiting approval (stage canary is); it approves nothing`},
		{fleeetv1.ApproveAnnotation, "r2/nope", `fleeet.dev/approve "r2/nope" names stage nope, which the rollout does not have`},
		{fleeetv1.ApproveAnnotation, "r1/canary", `fleeet.dev/approve "r1/canary" names revision r1, not the current revision r2`},
		{fleeetv1.ApproveAnnotation, "R2/canary", `fleeet.dev/approve "R2/canary" names revision R2, not the current revision r2`},
		{fleeetv1.ApproveAnnotation, "canary", `fleeet.dev/approve "canary" is not of the form <revision>/<stage>`},
		{fleeetv1.UndoAnnotation, "r1", `fleeet.dev/undo "r1" names revision r1, not the current revision r2; it rolls nothing back`},
	}
	for _, tc := range cases {
		t.Run(tc.value, func(t *testing.T) {
			g := NewWithT(t)
			m := staged(fleeetv1.RolloutStage{Name: "canary", Approval: fleeetv1.ManualApproval}, fleeetv1.RolloutStage{Name: "wide", Approval: fleeetv1.ManualApproval})
			m.Status.History = []fleeetv1.RolloutRecord{{Revision: "r1", Version: "v1", Outcome: fleeetv1.RolloutSucceeded}}
			m.Annotations = map[string]string{tc.annotation: tc.value}
			r := reconciler()
			for range 3 {
				r.reconcileRollout(r.Recorder, m, "r2", targets, unlimited, now)
			}
			g.Expect(m.Status.Rollout.Approved).To(BeEmpty())
			g.Expect(m.Status.Rollout.RolledBack).To(BeNil())
			g.Expect(warningsOf(r)).To(ConsistOf(ContainSubstring(tc.want)))
		})
	}

	g := NewWithT(t)
	m := staged(fleeetv1.RolloutStage{Name: "canary", Approval: fleeetv1.ManualApproval}, fleeetv1.RolloutStage{Name: "wide", Approval: fleeetv1.ManualApproval})
	m.Annotations = map[string]string{fleeetv1.ApproveAnnotation: "r2/canary"}
	r := reconciler()
	for range 3 {
		r.reconcileRollout(r.Recorder, m, "r2", targets, unlimited, now)
	}
	g.Expect(m.Status.Rollout.Approved).To(Equal([]string{"canary"}))
	g.Expect(warningsOf(r)).To(BeEmpty(), "an approval that approved, and stays once used, is no warning")
}

// warningsOf drains the events r's fake recorder holds and returns the
// Warning ones.
func warningsOf(r *Reconciler) []string { return eventsOf(r, "Warning") }

// eventsOf drains the events r's fake recorder holds and returns those of
// type kind (Normal, Warning), as "<kind> <reason> <message>".
func eventsOf(r *Reconciler, kind string) []string {
	var out []string
	for {
		select {
		case e := <-r.Recorder.(*events.FakeRecorder).Events:
			if strings.HasPrefix(e, kind+" ") {
				out = append(out, e)
			}
		default:
			return out
		}
	}
}

// Two tracks, eu and us, each with a canary stage: both canaries move at
// once, eu's awaiting its approval holds only eu, the Remotes in no stage
// wait for both tracks, and one budget holds them all.
func TestTracksAdvanceIndependently(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	long := now.Add(-time.Hour)
	m := staged(
		fleeetv1.RolloutStage{Name: "eu-canary", Track: "eu", Approval: fleeetv1.ManualApproval},
		fleeetv1.RolloutStage{Name: "us-canary", Track: "us"},
		fleeetv1.RolloutStage{Name: "eu-wide", Track: "eu", MaxUnavailable: ptr.To(intstr.FromString("100%"))},
	)
	m.Status.Version = "v2"
	old := func(name string, stage int) target {
		return target{name: name, stage: stage, holds: true, state: fleeetv1.SyncReady, since: long}
	}
	targets := []target{old("eu-1", 0), old("us-1", 1), old("us-2", 1), old("eu-2", 2), old("eu-3", 2), old("rest-1", 3)}
	r := reconciler()
	step := func(lim limits) {
		p := r.reconcileRollout(r.Recorder, m, "r2", targets, lim, now)
		for i := range targets {
			if slices.Contains(p.admitted, targets[i].name) {
				targets[i].updated, targets[i].since = true, long // moved, and Ready at once
			}
		}
	}

	step(unlimited)
	ro := m.Status.Rollout
	g.Expect(ro.Admitted).To(Equal([]string{"eu-1", "us-1"}), "each track's first stage moves at once")
	g.Expect(ro.Stage).To(Equal("eu-canary"))
	g.Expect(ro.Tracks).To(Equal([]fleeetv1.TrackStatus{{Name: "eu", Stage: "eu-canary"}, {Name: "us", Stage: "us-canary"}}))
	g.Expect(eventsOf(r, "Normal")).To(ContainElements(
		"Normal StageStarted stage eu-canary of v2 started", "Normal StageStarted stage us-canary of v2 started"))

	step(unlimited)
	ro = m.Status.Rollout
	g.Expect(ro.Admitted).To(Equal([]string{"us-2"}), "eu awaits its approval; us goes on")
	g.Expect(ro.Holding).To(Equal("track eu: stage eu-canary awaits approval (fleetctl rollout approve)"))

	step(unlimited)
	g.Expect(m.Status.Rollout.Admitted).To(BeEmpty(), "rest-1 waits for every track")
	g.Expect(m.Status.Rollout.Tracks[1]).To(Equal(fleeetv1.TrackStatus{Name: "us", Stage: "us-canary"}), "us is done")

	m.Annotations = map[string]string{fleeetv1.ApproveAnnotation: "r2/eu-canary"}
	budget := limits{budget: 1, budgetCap: 1, budgetOf: "the namespace's"}
	step(budget)
	ro = m.Status.Rollout
	g.Expect(ro.Approved).To(Equal([]string{"eu-canary"}))
	g.Expect(ro.Admitted).To(Equal([]string{"eu-2"}), "eu-wide moves, within the budget of one")
	g.Expect(ro.Holding).To(BeEmpty())
	step(budget)
	step(budget)
	g.Expect(m.Status.Rollout.Admitted).To(Equal([]string{"rest-1"}), "every track done: the rest moves")
	g.Expect(m.Status.Rollout.Stage).To(BeEmpty())
}
