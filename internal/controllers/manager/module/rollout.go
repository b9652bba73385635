package module

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/promquery"
	"github.com/fleeet-dev/fleeet/internal/rollout/window"
)

// target is one selected Remote as the rollout sees it.
type target struct {
	name string
	// offline: the Remote's Connected condition is False.
	offline bool
	// suspended: the Remote's spec.suspend holds its plan as it is.
	suspended bool
	// holds: the Remote's plan (one of its parts) holds some version of
	// the sync.
	holds bool
	// updated: it holds the Module's current version.
	updated bool
	// state of the sync the cluster reports for the current generation of
	// the part holding it; empty when not reported yet.
	state fleeetv1.SyncState
	// since is when the reported state last changed.
	since time.Time
	// stage is the index of the stage in spec.rollout.stages the Remote
	// belongs to; len(stages) for the implicit last one.
	stage int
	// message is the cluster's message for the sync.
	message string
	// health is how the sync's workloads are doing, as the cluster reports.
	health *fleeetv1.WorkloadHealth
	// drift is the drift the cluster reports in the sync's objects.
	drift *fleeetv1.SyncDrift
}

// podsNotReady reports whether the cluster says the sync's workloads have
// fewer pods ready than they want.
func (t *target) podsNotReady() bool {
	return t.health != nil && t.health.ReadyPods < t.health.DesiredPods
}

// failed reports whether the Remote failed on the version it was compiled
// towards: its sync Failed, or not Ready past the progress deadline since
// its state last changed.
func (t *target) failed(now time.Time, deadline time.Duration) bool {
	if !t.updated || t.away() {
		return false
	}
	if t.state == fleeetv1.SyncFailed {
		return true
	}
	return deadline > 0 && t.state != "" && t.state != fleeetv1.SyncReady && !t.since.IsZero() && now.Sub(t.since) > deadline
}

// reason says how a failed Remote failed, in the cluster's words.
func (t *target) reason() string {
	msg := t.message
	if t.state != fleeetv1.SyncFailed {
		msg = fmt.Sprintf("not available within progressDeadlineSeconds (%s since %s)", strings.ToLower(string(t.state)), t.since.UTC().Format(time.RFC3339))
		if t.message != "" {
			msg += ": " + t.message
		}
	}
	if t.health != nil {
		msg += "; workloads: " + t.health.Summary()
	}
	return msg
}

// decision is the outcome of one rollout step: what moves and what holds.
type decision struct {
	admitted []string
	// failed lists the updated online Remotes that failed.
	failed []*target
	// failing: more failed than maxFailures allows; onFailure applies, to
	// failed[0] first.
	failing bool
	// podsNotReady is the first updated Remote whose workloads have fewer
	// pods ready than they want.
	podsNotReady *target
	// stage is the stage in progress, or the one holding the next: of the
	// first track when there are several (tracks says each one's, holding
	// then joins theirs).
	stage  string
	tracks []fleeetv1.TrackStatus
	// awaiting lists the stages whose manual approval holds the next one:
	// one at most per track.
	awaiting []string
	// checked lists the stages whose check held for its duration, those of
	// the step before first; checks are the last answers to the checks of
	// the stages holding the next ones.
	checked []string
	checks  []fleeetv1.StageCheckStatus
	// checkFailed says why a stage's check failed: it did not hold within
	// its timeout. onFailure applies.
	checkFailed string
	// holding says what keeps further Remotes from moving.
	holding string
	// shut names the deployment windows that never open again, when none
	// does: the rollout holds until the spec changes.
	shut []window.Problem
	// requeueAfter is when a minReadySeconds, bake time or progress
	// deadline ends.
	requeueAfter time.Duration
	// waiting counts the online Remotes not yet running the current version
	// available.
	waiting int
	// moving counts the online Remotes of the stage in progress that are
	// admitted or updated but not available: what the rollout takes of the
	// fleet-wide budget.
	moving  int
	summary fleeetv1.ModuleSummary
}

// after asks for another step in d.
func (p *decision) after(d time.Duration) {
	if d > 0 && (p.requeueAfter == 0 || d < p.requeueAfter) {
		p.requeueAfter = d
	}
}

// away reports whether the Remote cannot take a new version now: it is
// offline, or suspended. Such Remotes are not admitted while away and hold
// a rollout up only when one went offline while moving (admit): one that
// comes back moves within its stage's maxUnavailable and the fleet-wide
// budget, so a fleet coming back at once (after an outage, or a restore
// from an old backup) is paced too.
func (t *target) away() bool { return t.offline || t.suspended }

// available reports whether a Remote runs the sync Ready, its pods all
// ready, for minReady; a Remote that holds nothing yet has nothing to lose
// and is available.
func (t *target) available(now time.Time, minReady time.Duration) bool {
	if !t.holds {
		return true
	}
	return t.state == fleeetv1.SyncReady && !t.podsNotReady() && now.Sub(t.since) >= minReady
}

// limits are what holds a rollout besides its own Remotes and stages.
type limits struct {
	// windows are the rollout's parsed deployment windows.
	windows []window.Window
	// budget is how many Remotes this rollout may have moving, given what
	// the other rollouts sharing its namespace's or the manager's cap have
	// moving; negative for no cap.
	budget int
	// budgetCap is the cap the budget comes from, and budgetOf whose it is
	// ("the namespace's", "the manager's").
	budgetCap int
	budgetOf  string
	// ask asks the manager's Prometheus-compatible server whether the
	// check of a stage of this Module holds, and returns the answer once
	// one came after the time given (promquery.Asker.Ask); nil when the
	// manager has no server.
	ask func(stage, query string, after time.Time) (promquery.Answer, bool)
}

// decide decides which Remotes may move to the Module's current revision.
// Stages go in order, each starting once the one before is complete: every
// online Remote of it updated and available (or failed within
// maxFailures), its bake time over and its approval given. Within a stage
// at most its maxUnavailable Remotes are unavailable at once, counting
// those already moving, offline or not; Remotes already unavailable on an
// older version move at once; otherwise offline and suspended Remotes are
// skipped, never counted, and move within those bounds once back, a stage
// with such a Remote to move not done until it has. Nothing moves once
// more than maxFailures Remotes failed, and nothing new starts while
// paused, outside the deployment windows, or beyond the fleet-wide budget.
// previous is the rollout status of the same revision from the last step,
// or empty.
func decide(m *fleeetv1.Module, targets []target, previous *fleeetv1.RolloutStatus, lim limits, now time.Time) decision {
	ro := m.Spec.Rollout
	minReady := time.Duration(ro.MinReadySeconds) * time.Second
	deadline := time.Duration(ro.ProgressDeadlineSeconds) * time.Second
	p := decision{summary: fleeetv1.ModuleSummary{Total: int32(len(targets))}, checked: previous.Checked}

	for i := range targets {
		t := &targets[i]
		p.count(t)
		if t.failed(now, deadline) {
			p.failed = append(p.failed, t)
		}
		if t.updated && t.state == fleeetv1.SyncReady {
			p.after(minReady - now.Sub(t.since))
		}
		if deadline > 0 && t.updated && t.state != fleeetv1.SyncReady && !t.since.IsZero() {
			p.after(deadline - now.Sub(t.since) + time.Second)
		}
		if !t.away() && !(t.updated && t.available(now, minReady)) {
			p.waiting++
		}
	}
	if len(p.failed) > scaled(ro.MaxFailures, len(targets), 0) {
		p.failing = true
		return p
	}
	p.advance(byStage(m, targets), previous, lim, now, minReady, deadline)
	open, next := window.Open(lim.windows, now)
	switch _, paused := pausedBy(m); {
	case paused != "":
		p.holding = paused
	case !open && next.IsZero():
		// Windows fail closed: none opens again, so the rollout holds
		// until the spec changes.
		p.shut = window.NeverOpen(lim.windows, now)
		p.holding = "outside its deployment windows, none of which opens again: " + window.Describe(p.shut)
	case !open:
		p.holding = "outside its deployment windows until " + next.UTC().Format(time.RFC3339)
		p.after(next.Sub(now))
	default:
		slices.Sort(p.admitted)
		return p
	}
	// Nothing new starts; what was admitted goes on.
	kept := slices.DeleteFunc(slices.Clone(p.admitted), func(name string) bool { return !slices.Contains(previous.Admitted, name) })
	p.moving -= len(p.admitted) - len(kept)
	p.admitted = kept
	slices.Sort(p.admitted)
	return p
}

// pausedBy says who paused m's rolling update by hand, as the reason and
// message of its RolloutPaused condition: spec.rollout.paused (declared
// with the spec, in git), the fleeet.dev/pause annotation (fleetctl rollout
// pause), or both, the spec's reason first; "" when neither does. Each
// names the way to lift it.
func pausedBy(m *fleeetv1.Module) (reason, msg string) {
	if m.Spec.Rollout.Strategy != fleeetv1.RollingUpdateStrategy {
		return "", ""
	}
	var by []string
	if m.Spec.Rollout.Paused {
		reason = fleeetv1.ReasonPausedBySpec
		by = append(by, "spec.rollout.paused (set it to false where the spec is kept)")
	}
	if note, ok := m.Annotations[fleeetv1.PauseAnnotation]; ok {
		if len(note) > fleeetv1.PauseAnnotationMax {
			// Admission refuses this already; a manager running without it
			// still writes no huge condition.
			note = note[:fleeetv1.PauseAnnotationMax] + "..."
		}
		if reason == "" {
			reason = fleeetv1.ReasonPausedByAnnotation
		}
		by = append(by, fmt.Sprintf("annotation %s %q (fleetctl rollout resume %s removes it)", fleeetv1.PauseAnnotation, note, m.Name))
	}
	if reason == "" {
		return "", ""
	}
	return reason, "paused by " + strings.Join(by, " and ")
}

// count adds a Remote to the summary.
func (p *decision) count(t *target) {
	if t.offline {
		p.summary.Offline++
	}
	if t.suspended {
		p.summary.Suspended++
	}
	if t.drift.Seen() {
		p.summary.Drifted++
	}
	if !t.updated {
		return
	}
	p.summary.Updated++
	if t.podsNotReady() {
		p.summary.PodsNotReady++
		if p.podsNotReady == nil {
			p.podsNotReady = t
		}
	}
	switch t.state {
	case fleeetv1.SyncReady:
		p.summary.Ready++
	case fleeetv1.SyncFailed:
		p.summary.Failed++
	case fleeetv1.SyncBlocked:
		p.summary.Blocked++
	}
}

// stage is one step of the rollout and the Remotes it holds.
type stage struct {
	name           string
	spec           *fleeetv1.RolloutStage // nil for the implicit last stage
	maxUnavailable *intstr.IntOrString
	targets        []*target
}

// advance moves each track through its stages (byTrack), the Remotes in no
// stage once every track is done. Each track's stage in progress admits
// within its maxUnavailable, and all of them within one budget: what is
// moving already in any of them is counted before anything new is
// admitted.
func (p *decision) advance(stages []stage, previous *fleeetv1.RolloutStatus, lim limits, now time.Time, minReady, deadline time.Duration) {
	tracks, rest := byTrack(stages)
	done := true
	var turns []turn
	for _, tr := range tracks {
		p.holding = ""
		tn, trackDone := p.advanceTrack(tr.stages, rest != nil, previous, lim, now, minReady, deadline)
		done = done && trackDone
		if tn != nil {
			tn.track = len(p.tracks)
			turns = append(turns, *tn)
		}
		p.tracks = append(p.tracks, fleeetv1.TrackStatus{Name: tr.name, Stage: p.stage, Holding: p.holding})
	}
	restHolding := ""
	if rest != nil && done {
		tn := p.classify(*rest, previous.Admitted, now, minReady, deadline)
		tn.track = -1
		turns = append(turns, tn)
	}
	taken := 0
	for _, tn := range turns {
		taken += tn.unavailable
	}
	for _, tn := range turns {
		moving, held := p.grant(tn, lim, taken)
		taken += moving - tn.unavailable
		p.moving += moving
		switch {
		case held == "":
		case tn.track < 0:
			restHolding = held
		default:
			p.tracks[tn.track].Holding = held
		}
	}
	var holding []string
	for _, t := range p.tracks {
		if t.Holding != "" {
			holding = append(holding, fmt.Sprintf("track %s: %s", cmp.Or(t.Name, "(stages without a track)"), t.Holding))
		}
	}
	switch {
	case rest != nil && done:
		p.stage, p.holding = rest.name, restHolding
	case len(p.tracks) > 1:
		p.stage, p.holding = p.tracks[0].Stage, strings.Join(holding, "; ")
	case len(p.tracks) == 1:
		p.stage, p.holding = p.tracks[0].Stage, p.tracks[0].Holding
	}
	if len(p.tracks) < 2 {
		p.tracks = nil
	}
}

// advanceTrack finds a track's stage in progress, the first not done or
// held (followed: a stage follows the track's last), and returns its turn
// to admit, nil when every stage of the track is done and holds nothing,
// and whether it is.
func (p *decision) advanceTrack(stages []stage, followed bool, previous *fleeetv1.RolloutStatus, lim limits, now time.Time, minReady, deadline time.Duration) (*turn, bool) {
	for i, st := range stages {
		p.stage = st.name
		tn := p.classify(st, previous.Admitted, now, minReady, deadline)
		if !tn.done() {
			return &tn, false
		}
		if i == len(stages)-1 && !followed {
			return nil, true
		}
		if p.holds(st, previous, lim, now, minReady) {
			return nil, false
		}
	}
	return nil, true
}

// track is a sequence of stages (RolloutStage.Track).
type track struct {
	name   string
	stages []stage
}

// byTrack groups the declared stages by track, each track in the order its
// first stage is listed, and returns the implicit last stage of the Remotes
// in no stage apart (nil when there are none).
func byTrack(stages []stage) (tracks []track, rest *stage) {
	for i := range stages {
		st := stages[i]
		if st.spec == nil {
			rest = &stages[i]
			continue
		}
		k := slices.IndexFunc(tracks, func(t track) bool { return t.name == st.spec.Track })
		if k < 0 {
			tracks = append(tracks, track{name: st.spec.Track})
			k = len(tracks) - 1
		}
		tracks[k].stages = append(tracks[k].stages, st)
	}
	return tracks, rest
}

// byStage groups the Remotes by the stage they belong to (target.stage), in
// order, leaving out stages with no Remote.
func byStage(m *fleeetv1.Module, targets []target) []stage {
	specs := m.Spec.Rollout.Stages
	stages := make([]stage, len(specs)+1)
	for i := range stages {
		stages[i].maxUnavailable = m.Spec.Rollout.MaxUnavailable
		if i < len(specs) {
			stages[i].name, stages[i].spec = specs[i].Name, &specs[i]
			if specs[i].MaxUnavailable != nil {
				stages[i].maxUnavailable = specs[i].MaxUnavailable
			}
		}
	}
	for i := range targets {
		st := &stages[targets[i].stage]
		st.targets = append(st.targets, &targets[i])
	}
	return slices.DeleteFunc(stages, func(st stage) bool { return len(st.targets) == 0 })
}

// turn is a stage in progress as a step finds it: how many of its Remotes
// are unavailable (moving, or admitted again), and those that may move
// next, in order.
type turn struct {
	st          stage
	unavailable int
	candidates  []string
	// track is the index of the stage's track in decision.tracks; -1 for
	// the Remotes in no stage.
	track int
}

// done reports whether the stage is done: every online Remote of it
// updated and available, or failed within maxFailures.
func (tn turn) done() bool { return len(tn.candidates) == 0 && tn.unavailable == 0 }

// classify sorts the stage's Remotes into those unavailable and those that
// may move next, and admits again those admitted before and still moving,
// and those already unavailable on an older version.
func (p *decision) classify(st stage, previous []string, now time.Time, minReady, deadline time.Duration) turn {
	tn := turn{st: st}
	for _, t := range st.targets {
		switch {
		case t.offline && t.updated:
			// Gone offline while moving, perhaps mid-update, or only
			// unseen (its agent cut off while the cluster runs on): it
			// comes back where it was, so it keeps its place until it is
			// back and available, or others would move beside it.
			if !t.available(now, minReady) {
				tn.unavailable++
			}
		case t.away():
			// Nothing is admitted to a Remote that cannot take it now: once
			// back, it moves like any other, within maxUnavailable.
		case t.updated:
			if !t.available(now, minReady) && !t.failed(now, deadline) {
				tn.unavailable++
			}
		case slices.Contains(previous, t.name) || !t.available(now, minReady):
			// Admitted earlier and still moving, or already unavailable on an
			// older version (failing, or superseded mid-rollout): moving it
			// costs no availability.
			tn.unavailable++
			p.admitted = append(p.admitted, t.name)
		default:
			tn.candidates = append(tn.candidates, t.name)
		}
	}
	return tn
}

// grant admits the turn's next candidates within its stage's
// maxUnavailable and what the budget leaves once taken, the Remotes the
// Module has moving in every stage in progress, is counted; it returns how
// many of the stage's Remotes are moving then, and what holds the rest
// when the budget does.
func (p *decision) grant(tn turn, lim limits, taken int) (moving int, holding string) {
	budget := max(1, scaled(tn.st.maxUnavailable, len(tn.st.targets), 1)) - tn.unavailable
	if left := lim.budget - taken; lim.budget >= 0 && left < budget {
		budget = left
		if budget <= 0 && len(tn.candidates) > 0 {
			holding = fmt.Sprintf("%s budget is used up: %d Remotes moving at most, %d of them for other Modules",
				lim.budgetOf, lim.budgetCap, lim.budgetCap-lim.budget)
			p.after(budgetRetry)
		}
	}
	moving = tn.unavailable
	for _, name := range tn.candidates {
		if budget <= 0 {
			break
		}
		p.admitted = append(p.admitted, name)
		moving++
		budget--
	}
	return moving, holding
}

// holds reports whether a done stage holds the next one: it bakes for
// pauseAfter from when its last Remote became available, and waits for its
// check to hold (checking, asked meanwhile), then for its manual approval.
func (p *decision) holds(st stage, previous *fleeetv1.RolloutStatus, lim limits, now time.Time, minReady time.Duration) bool {
	if st.spec == nil {
		return false
	}
	var last time.Time
	for _, t := range st.targets {
		if t.updated && t.since.After(last) {
			last = t.since
		}
	}
	done := last.Add(minReady)
	checking := p.checking(st, previous.Checks, lim, done, now)
	if st.spec.PauseAfter != nil {
		if until := done.Add(st.spec.PauseAfter.Duration); now.Before(until) {
			p.holding = fmt.Sprintf("stage %s bakes until %s", st.name, until.UTC().Format(time.RFC3339))
			p.after(until.Sub(now))
			return true
		}
	}
	if checking {
		return true
	}
	if st.spec.Approval == fleeetv1.ManualApproval && !slices.Contains(previous.Approved, st.name) {
		p.awaiting = append(p.awaiting, st.name)
		p.holding = fmt.Sprintf("stage %s awaits approval (fleetctl rollout approve)", st.name)
		return true
	}
	return false
}

// checking reports whether the stage's check holds it: it has one, which
// has not held for its duration since the stage was done. It asks the
// server unless the last answer (of previous, the step before's) is
// recent, records the answer in p.checks, the stage in p.checked once the check
// held long enough, and p.checkFailed once an answer that it does not hold
// comes past the check's timeout, counted from when the stage was done or,
// for a check added since, from its first answer.
func (p *decision) checking(st stage, previous []fleeetv1.StageCheckStatus, lim limits, done, now time.Time) bool {
	c := st.spec.Check
	if c == nil || slices.Contains(p.checked, st.name) {
		return false
	}
	every := checkInterval(c)
	next := fleeetv1.StageCheckStatus{Stage: st.name}
	if i := slices.IndexFunc(previous, func(c fleeetv1.StageCheckStatus) bool { return c.Stage == st.name }); i >= 0 {
		next = *previous[i].DeepCopy()
	}
	var asked time.Time
	if next.CheckedAt != nil {
		asked = next.CheckedAt.Time
	}
	if asked.IsZero() || now.Sub(asked) >= every {
		ans, answered := promquery.Answer{At: now, Err: errNoServer}, true
		if lim.ask != nil {
			ans, answered = lim.ask(st.name, strings.ReplaceAll(c.Query, "$(REMOTES)", promquery.Names(st.names())), asked)
		}
		// Unanswered, the answer's coming reconciles the Module; the
		// requeue is for an answer whose notice was lost.
		p.after(every)
		if answered {
			at := metav1.NewTime(ans.At)
			next.CheckedAt = &at
			if next.Started == nil {
				next.Started = &at
			}
			next.Answered, next.Message = ans.Err == nil, ans.Description
			if ans.Err != nil {
				next.Message = "cannot ask: " + ans.Err.Error()
			}
			switch {
			case !ans.Holds || ans.Err != nil:
				next.HoldingSince = nil
			case next.HoldingSince == nil:
				next.HoldingSince = &at
			}
		}
	} else {
		p.after(every - now.Sub(asked))
	}
	p.checks = append(p.checks, next)
	// Held for its duration: an answer that it holds came that long after
	// the first of an unbroken run of them.
	if since := next.HoldingSince; since != nil && next.CheckedAt.Sub(since.Time) >= c.For.Duration {
		p.checked = append(slices.Clone(p.checked), st.name)
		return false
	}
	switch since := next.HoldingSince; {
	case next.CheckedAt == nil:
		p.holding = fmt.Sprintf("stage %s's check is asked; no answer yet", st.name)
	case since != nil:
		p.holding = fmt.Sprintf("stage %s's check holds since %s, for %s: %s", st.name, since.UTC().Format(time.RFC3339), c.For.Duration, next.Message)
	case next.Answered && c.Timeout.Duration > 0 && now.Sub(later(done, next.Started.Time)) > c.Timeout.Duration:
		p.holding = fmt.Sprintf("stage %s's check did not hold for %s within %s of the stage being done: %s",
			st.name, c.For.Duration, c.Timeout.Duration, next.Message)
		p.checkFailed = cmp.Or(p.checkFailed, p.holding)
	default:
		p.holding = fmt.Sprintf("stage %s's check does not hold: %s", st.name, next.Message)
	}
	return true
}

// errNoServer is the answer to every check when the manager has no server
// to ask.
var errNoServer = errors.New("the manager has no Prometheus-compatible server to ask (--prometheus-url)")

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// checkInterval is how often a check is asked: a fifth of its duration,
// from 5 to 30 seconds.
func checkInterval(c *fleeetv1.StageCheck) time.Duration {
	return min(max(c.For.Duration/5, 5*time.Second), 30*time.Second)
}

// names lists the stage's Remotes.
func (st stage) names() []string {
	names := make([]string, len(st.targets))
	for i, t := range st.targets {
		names[i] = t.name
	}
	return names
}

// budgetRetry is how soon a rollout held by the fleet-wide budget looks
// again: other Modules' Remotes free it, which its own watches do not see.
const budgetRetry = 5 * time.Second

// scaled scales an integer or percentage to total, rounding down; def when
// unset or invalid.
func scaled(v *intstr.IntOrString, total, def int) int {
	if v == nil {
		return def
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, false)
	if err != nil {
		return def
	}
	return n
}
