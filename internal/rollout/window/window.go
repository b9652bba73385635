// Package window parses a Module's rollout windows and tells when they are
// open, for the admission webhook (which refuses windows that can never
// open) and the Module controller (which moves Remotes only while one is
// open) alike.
package window

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // windows name IANA time zones; images carry no zoneinfo

	"github.com/robfig/cron/v3"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Window is a parsed rollout window.
type Window struct {
	Schedule cron.Schedule
	Duration time.Duration
	Location *time.Location
	// Field is the path of the window's schedule and Spec the schedule as
	// written, for messages.
	Field, Spec string
}

// Problem is what is wrong with one field of a window.
type Problem struct {
	// Field is the field path, such as spec.rollout.windows[0].schedule.
	Field string `json:"field"`
	// Error says what is wrong, lower-case, without the field.
	Error string `json:"error"`
}

func (p Problem) String() string { return p.Field + ": " + p.Error }

// Describe joins problems into one message; empty for none.
func Describe(ps []Problem) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// Parse parses a rollout's windows, returning every field that does not
// parse; the windows returned are those that do.
func Parse(ws []fleeetv1.RolloutWindow) ([]Window, []Problem) {
	parsed := make([]Window, 0, len(ws))
	var problems []Problem
	for i, w := range ws {
		field := func(name string) string { return fmt.Sprintf("spec.rollout.windows[%d].%s", i, name) }
		loc := time.UTC
		if w.TimeZone != "" {
			var err error
			if loc, err = time.LoadLocation(w.TimeZone); err != nil {
				problems = append(problems, Problem{field("timeZone"), fmt.Sprintf("%q is not an IANA time zone name", w.TimeZone)})
			}
		}
		if w.Duration.Duration <= 0 {
			problems = append(problems, Problem{field("duration"), "must be positive"})
		}
		schedule, err := cron.ParseStandard(w.Schedule)
		if err != nil {
			problems = append(problems, Problem{field("schedule"), fmt.Sprintf("%q does not parse as a five-field cron schedule: %v", w.Schedule, err)})
		}
		if loc != nil && err == nil && w.Duration.Duration > 0 {
			parsed = append(parsed, Window{Schedule: schedule, Duration: w.Duration.Duration, Location: loc, Field: field("schedule"), Spec: w.Schedule})
		}
	}
	return parsed, problems
}

// NeverOpen names each window that does not open again after now: its
// schedule has no activation within the cron library's five-year horizon
// (0 0 30 2 * has none).
func NeverOpen(ws []Window, now time.Time) []Problem {
	var shut []Problem
	for _, w := range ws {
		if w.Schedule.Next(now.In(w.Location)).IsZero() {
			shut = append(shut, Problem{w.Field, fmt.Sprintf("%q never opens (no time matches it in the next five years)", w.Spec)})
		}
	}
	return shut
}

// Open reports whether now lies in one of the windows (always, with none)
// and, when not, when the next one opens. Windows fail closed: a schedule
// that never fires opens nothing, and next is zero when no window opens
// again.
func Open(ws []Window, now time.Time) (bool, time.Time) {
	if len(ws) == 0 {
		return true, time.Time{}
	}
	var next time.Time
	for _, w := range ws {
		local := now.In(w.Location)
		// The window is open when it opened within the last duration.
		if opened := w.Schedule.Next(local.Add(-w.Duration)); !opened.IsZero() && !opened.After(local) {
			return true, time.Time{}
		}
		if n := w.Schedule.Next(local); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return false, next
}
