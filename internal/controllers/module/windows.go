package module

import (
	"fmt"
	"time"
	_ "time/tzdata" // windows name IANA time zones; images carry no zoneinfo

	"github.com/robfig/cron/v3"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// window is a parsed rollout window.
type window struct {
	schedule cron.Schedule
	duration time.Duration
	location *time.Location
	// field and spec name the window's schedule and say what it is, for
	// messages.
	field, spec string
}

// parseWindows parses a rollout's windows, naming the field of the first
// that does not parse.
func parseWindows(ws []fleeetv1.RolloutWindow) ([]window, error) {
	parsed := make([]window, 0, len(ws))
	for i, w := range ws {
		schedule, err := cron.ParseStandard(w.Schedule)
		if err != nil {
			return nil, fmt.Errorf("spec.rollout.windows[%d].schedule: %w", i, err)
		}
		loc := time.UTC
		if w.TimeZone != "" {
			if loc, err = time.LoadLocation(w.TimeZone); err != nil {
				return nil, fmt.Errorf("spec.rollout.windows[%d].timeZone: %w", i, err)
			}
		}
		if w.Duration.Duration <= 0 {
			return nil, fmt.Errorf("spec.rollout.windows[%d].duration: must be positive", i)
		}
		parsed = append(parsed, window{schedule: schedule, duration: w.Duration.Duration, location: loc,
			field: fmt.Sprintf("spec.rollout.windows[%d].schedule", i), spec: w.Schedule})
	}
	return parsed, nil
}

// windowsOpen reports whether now lies in one of the windows (always, with
// none) and, when not, when the next one opens. Windows fail closed: a
// schedule that does not fire within the cron library's horizon (five
// years; 0 0 30 2 * never does) gives the zero time, which opens nothing,
// and next is zero too when no window opens again.
func windowsOpen(ws []window, now time.Time) (bool, time.Time) {
	if len(ws) == 0 {
		return true, time.Time{}
	}
	var next time.Time
	for _, w := range ws {
		local := now.In(w.location)
		// The window is open when it opened within the last duration.
		if opened := w.schedule.Next(local.Add(-w.duration)); !opened.IsZero() && !opened.After(local) {
			return true, time.Time{}
		}
		if n := w.schedule.Next(local); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return false, next
}

// neverOpen describes the windows that do not open again after now,
// naming each one's schedule field; empty when every window opens again.
func neverOpen(ws []window, now time.Time) []string {
	var shut []string
	for _, w := range ws {
		if w.schedule.Next(now.In(w.location)).IsZero() {
			shut = append(shut, fmt.Sprintf("%s %q never opens (no start within five years)", w.field, w.spec))
		}
	}
	return shut
}
