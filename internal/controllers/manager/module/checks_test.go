package module

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/promquery"
)

// server is a Prometheus-compatible server as a stage's check sees it:
// what it answers next, and the queries it was asked. It answers at once,
// at the time of the step that asks (limits).
type server struct {
	holds  bool
	err    error
	parsed []string
}

func (s *server) limits(now time.Time) limits {
	return limits{budget: -1, ask: func(_, q string, _ time.Time) (promquery.Answer, bool) {
		s.parsed = append(s.parsed, q)
		switch {
		case s.err != nil:
			return promquery.Answer{At: now, Err: s.err}, true
		case s.holds:
			return promquery.Answer{At: now, Holds: true, Description: "the query returned 1 series"}, true
		}
		return promquery.Answer{At: now, Description: "the query returned no sample"}, true
	}}
}

// checked is a two-stage rollout whose canary stage, of Remote canary.1,
// has a check of 1m within 10m, and whose Remote wide waits for it.
func checked(onFailure fleeetv1.FailurePolicy) (*fleeetv1.Module, []target, time.Time) {
	m := staged(fleeetv1.RolloutStage{Name: "canary", Check: &fleeetv1.StageCheck{
		Query: `sum(rate(errors_total{cluster=~"$(REMOTES)"}[5m])) < 1`,
		For:   metav1.Duration{Duration: time.Minute}, Timeout: metav1.Duration{Duration: 10 * time.Minute}}})
	m.Spec.Rollout.OnFailure = onFailure
	m.Status.Version = "v2"
	done := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return m, []target{
		{name: "canary.1", stage: 0, holds: true, updated: true, state: fleeetv1.SyncReady, since: done},
		{name: "wide", stage: 1, holds: true, state: fleeetv1.SyncReady, since: done.Add(-time.Hour)},
	}, done
}

func TestAStageCheckMustHoldForItsDurationWithoutABreak(t *testing.T) {
	g := NewWithT(t)
	m, targets, done := checked(fleeetv1.PauseOnFailure)
	prom := &server{holds: true}
	r := reconciler()
	step := func(at time.Duration) decision {
		p := r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(done.Add(at)), done.Add(at))
		r.reconcileStatus(m, p, compileNotes{})
		return p
	}

	p := step(0)
	g.Expect(prom.parsed).To(Equal([]string{`sum(rate(errors_total{cluster=~"canary\\.1"}[5m])) < 1`}),
		"$(REMOTES) matches the stage's Remotes' names exactly, quoted for a PromQL string")
	g.Expect(m.Status.Rollout.Admitted).To(BeEmpty(), "the next stage waits for the check")
	g.Expect(m.Status.Rollout.Checks[0].HoldingSince.Time).To(Equal(done))
	g.Expect(m.Status.Rollout.Holding).To(HavePrefix("stage canary's check holds since 2026-11-30T12:00:00Z, for 1m0s"))
	g.Expect(p.requeueAfter).To(Equal(12*time.Second), "asked again in a fifth of its duration")

	step(5 * time.Second)
	g.Expect(prom.parsed).To(HaveLen(1), "an answer is kept until it is due again")

	prom.holds = false
	step(20 * time.Second)
	g.Expect(m.Status.Rollout.Checks[0].HoldingSince).To(BeNil(), "a break starts it over")
	g.Expect(m.Status.Rollout.Holding).To(Equal("stage canary's check does not hold: the query returned no sample"))

	prom.holds = true
	step(40 * time.Second)
	step(90 * time.Second)
	g.Expect(m.Status.Rollout.Checked).To(BeEmpty(), "50 s of holding is not a minute")
	step(101 * time.Second)
	g.Expect(m.Status.Rollout.Checked).To(BeEmpty(), "a minute has passed, but no answer since the one at 90 s says it still holds")
	step(103 * time.Second)
	g.Expect(m.Status.Rollout.Checked).To(Equal([]string{"canary"}))
	g.Expect(m.Status.Rollout.Admitted).To(Equal([]string{"wide"}))
	g.Expect(eventsOf(r, "Normal")).To(ContainElement("Normal StageChecked stage canary of v2: its check held for 1m0s"))

	asked := len(prom.parsed)
	prom.holds = false
	step(200 * time.Second)
	g.Expect(prom.parsed).To(HaveLen(asked), "a stage checked for this revision is not asked again")
	g.Expect(m.Status.Rollout.Admitted).To(Equal([]string{"wide"}))
}

func TestAStageCheckThatDoesNotHoldWithinItsTimeoutFails(t *testing.T) {
	t.Run("rolls back", func(t *testing.T) {
		g := NewWithT(t)
		m, targets, done := checked(fleeetv1.RollbackOnFailure)
		m.Status.History = []fleeetv1.RolloutRecord{{Revision: "r1", Version: "v1", Outcome: fleeetv1.RolloutSucceeded}}
		prom := &server{}
		r := reconciler()
		r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(done), done)
		r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(done.Add(9*time.Minute)), done.Add(9*time.Minute))
		g.Expect(m.Status.Rollout.RolledBack).To(BeNil(), "within its timeout it holds")
		now := done.Add(10*time.Minute + time.Second)
		p := r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(now), now)
		r.reconcileStatus(m, p, compileNotes{})
		g.Expect(m.Status.Rollout.RolledBack).To(Equal(&fleeetv1.Rollback{To: "r1", Version: "v1", Time: metav1.NewTime(now),
			Message: "stage canary's check did not hold for 1m0s within 10m0s of the stage being done: the query returned no sample"}))
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.RolledBackCondition)).To(BeTrue())
	})
	t.Run("pauses until it holds", func(t *testing.T) {
		g := NewWithT(t)
		m, targets, done := checked(fleeetv1.PauseOnFailure)
		prom := &server{}
		r := reconciler()
		r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(done), done)
		p := r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(done.Add(11*time.Minute)), done.Add(11*time.Minute))
		r.reconcileStatus(m, p, compileNotes{})
		paused := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)
		g.Expect(paused).NotTo(BeNil())
		g.Expect(paused.Reason).To(Equal(fleeetv1.ReasonCheckFailed))
		g.Expect(paused.Message).To(ContainSubstring("the rollout holds until the check holds for its duration or the Module's spec changes"))
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeFalse())

		prom.holds = true
		r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(done.Add(12*time.Minute)), done.Add(12*time.Minute))
		p = r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(done.Add(13*time.Minute)), done.Add(13*time.Minute))
		r.reconcileStatus(m, p, compileNotes{})
		g.Expect(m.Status.Rollout.Admitted).To(Equal([]string{"wide"}))
		g.Expect(apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)).To(BeNil())
	})
}

// A check that gets no answer holds its stage and fails nothing: the
// rollout acts only on what the server says.
func TestAStageCheckWithoutAnAnswerHoldsAndFailsNothing(t *testing.T) {
	for name, lim := range map[string]func(time.Time) limits{
		"the server cannot be reached": (&server{err: errors.New("dial tcp 10.0.0.9:9090: connect: connection refused")}).limits,
		"the manager has none":         func(time.Time) limits { return unlimited },
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m, targets, done := checked(fleeetv1.RollbackOnFailure)
			m.Status.History = []fleeetv1.RolloutRecord{{Revision: "r1", Version: "v1", Outcome: fleeetv1.RolloutSucceeded}}
			r := reconciler()
			p := r.reconcileRollout(r.Recorder, m, "r2", targets, lim(done.Add(time.Hour)), done.Add(time.Hour))
			r.reconcileStatus(m, p, compileNotes{})
			g.Expect(m.Status.Rollout.RolledBack).To(BeNil())
			g.Expect(m.Status.Rollout.Admitted).To(BeEmpty())
			g.Expect(m.Status.Rollout.Checks[0].Answered).To(BeFalse())
			g.Expect(m.Status.Rollout.Holding).To(HavePrefix("stage canary's check does not hold: cannot ask: "))
			g.Expect(apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.RolloutPausedCondition)).To(BeNil())
		})
	}
}

// A check added to a stage done long ago gets its whole timeout from the
// first time it is asked: adding one never rolls a version back at once.
func TestACheckAddedToAStageDoneAlreadyGetsItsWholeTimeout(t *testing.T) {
	g := NewWithT(t)
	m, targets, done := checked(fleeetv1.RollbackOnFailure)
	m.Status.History = []fleeetv1.RolloutRecord{{Revision: "r1", Version: "v1", Outcome: fleeetv1.RolloutSucceeded}}
	prom := &server{}
	r := reconciler()
	added := done.Add(24 * time.Hour)
	r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(added), added)
	g.Expect(m.Status.Rollout.RolledBack).To(BeNil())
	g.Expect(m.Status.Rollout.Checks[0].Started.Time).To(Equal(added))
	r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(added.Add(9*time.Minute)), added.Add(9*time.Minute))
	g.Expect(m.Status.Rollout.RolledBack).To(BeNil(), "within the timeout from its first answer")
	r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(added.Add(11*time.Minute)), added.Add(11*time.Minute))
	g.Expect(m.Status.Rollout.RolledBack).NotTo(BeNil())
}

// Until the first answer comes, the stage holds and says it is asking.
func TestAStageCheckWaitsForItsFirstAnswer(t *testing.T) {
	g := NewWithT(t)
	m, targets, done := checked(fleeetv1.PauseOnFailure)
	r := reconciler()
	pending := limits{budget: -1, ask: func(string, string, time.Time) (promquery.Answer, bool) { return promquery.Answer{}, false }}
	p := r.reconcileRollout(r.Recorder, m, "r2", targets, pending, done)
	g.Expect(m.Status.Rollout.Holding).To(Equal("stage canary's check is asked; no answer yet"))
	g.Expect(m.Status.Rollout.Checks).To(Equal([]fleeetv1.StageCheckStatus{{Stage: "canary"}}))
	g.Expect(p.requeueAfter).To(Equal(12*time.Second), "in case the answer's notice is lost")
	prom := &server{holds: true}
	r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(done.Add(time.Second)), done.Add(time.Second))
	g.Expect(m.Status.Rollout.Checks[0].HoldingSince.Time).To(Equal(done.Add(time.Second)))
}

// A failed check pauses the whole Module, as a failed Remote does: the
// other tracks hold too.
func TestAFailedCheckPausesEveryTrack(t *testing.T) {
	g := NewWithT(t)
	m, targets, done := checked(fleeetv1.PauseOnFailure)
	m.Spec.Rollout.Stages[0].Track = "eu"
	m.Spec.Rollout.Stages = append(m.Spec.Rollout.Stages, fleeetv1.RolloutStage{Name: "us", Track: "us"})
	targets = append(targets, target{name: "us-1", stage: 1, holds: true, state: fleeetv1.SyncReady, since: done.Add(-time.Hour)})
	targets[1].stage = 2 // wide: in no stage
	prom := &server{}
	r := reconciler()
	r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(done), done)
	g.Expect(m.Status.Rollout.Admitted).To(Equal([]string{"us-1"}), "us goes on while eu's check does not hold yet")
	r.reconcileRollout(r.Recorder, m, "r2", targets, prom.limits(done.Add(11*time.Minute)), done.Add(11*time.Minute))
	g.Expect(m.Status.Rollout.Admitted).To(BeEmpty(), "once it failed, nothing moves anywhere")
}
