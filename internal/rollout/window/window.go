// Package window parses a Module's rollout windows, for the admission
// webhook (which refuses windows that can never open) and the Module
// controller (which moves Remotes only while one is open) alike.
package window

import (
	"fmt"
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
}

// Problem is what is wrong with one field of a window.
type Problem struct {
	// Field is the field path, such as spec.rollout.windows[0].schedule.
	Field string `json:"field"`
	// Error says what is wrong, lower-case, without the field.
	Error string `json:"error"`
}

func (p Problem) String() string { return p.Field + ": " + p.Error }

// Parse parses a rollout's windows, returning every problem found. A
// schedule that parses but has no activation after now (cron searches five
// years ahead) is a problem too: such a window would never open.
func Parse(ws []fleeetv1.RolloutWindow, now time.Time) ([]Window, []Problem) {
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
		switch {
		case err != nil:
			problems = append(problems, Problem{field("schedule"), fmt.Sprintf("%q does not parse as a five-field cron schedule: %v", w.Schedule, err)})
		case loc != nil && schedule.Next(now.In(loc)).IsZero():
			problems = append(problems, Problem{field("schedule"), fmt.Sprintf("%q never opens (no time matches it in the next five years); rollouts would wait for ever", w.Schedule)})
		}
		if loc != nil && err == nil && w.Duration.Duration > 0 {
			parsed = append(parsed, Window{Schedule: schedule, Duration: w.Duration.Duration, Location: loc})
		}
	}
	return parsed, problems
}
