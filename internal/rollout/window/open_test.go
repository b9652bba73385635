package window

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestWindowsOpenOnTheirScheduleForTheirDuration(t *testing.T) {
	g := NewWithT(t)
	// Weekdays 09:00 to 11:00 in Berlin (UTC+1 in November).
	ws, err := parse([]fleeetv1.RolloutWindow{{Schedule: "0 9 * * 1-5", Duration: metav1.Duration{Duration: 2 * time.Hour}, TimeZone: "Europe/Berlin"}})
	g.Expect(err).NotTo(HaveOccurred())
	monday := func(hour, minute int) time.Time { return time.Date(2026, 11, 23, hour, minute, 0, 0, time.UTC) }
	cases := []struct {
		now  time.Time
		open bool
		next time.Time
	}{
		{monday(7, 59), false, monday(8, 0)},
		{monday(8, 0), true, time.Time{}},
		{monday(9, 59), true, time.Time{}},
		{monday(10, 0), false, monday(8, 0).AddDate(0, 0, 1)},
		{monday(8, 0).AddDate(0, 0, 5), false, monday(8, 0).AddDate(0, 0, 7)}, // Saturday
	}
	for _, tc := range cases {
		open, next := Open(ws, tc.now)
		g.Expect(open).To(Equal(tc.open), "at %s", tc.now)
		g.Expect(next.Equal(tc.next)).To(BeTrue(), "at %s: next %s, want %s", tc.now, next, tc.next)
	}
	open, _ := Open(nil, monday(3, 0))
	g.Expect(open).To(BeTrue(), "no window is always open")
}

// Windows fail closed: a schedule that never fires opens nothing (it used
// to read as always open), a time that a DST change skips opens nothing
// that day, and a window longer than its period is open throughout.
func TestWindowsFailClosed(t *testing.T) {
	utc := func(s string) time.Time {
		at, err := time.Parse(time.RFC3339, s)
		if err != nil {
			panic(err)
		}
		return at
	}
	window := func(schedule string, d time.Duration, zone string) fleeetv1.RolloutWindow {
		return fleeetv1.RolloutWindow{Schedule: schedule, Duration: metav1.Duration{Duration: d}, TimeZone: zone}
	}
	feb30 := window("0 0 30 2 *", 24*time.Hour, "")
	cases := []struct {
		name    string
		windows []fleeetv1.RolloutWindow
		now     time.Time
		open    bool
		next    time.Time
		never   string
	}{
		{"30 February never opens", []fleeetv1.RolloutWindow{feb30}, utc("2026-03-02T00:00:00Z"), false, time.Time{},
			`spec.rollout.windows[0].schedule: "0 0 30 2 *" never opens (no time matches it in the next five years)`},
		{"30 February, at the start of March", []fleeetv1.RolloutWindow{feb30}, utc("2026-03-01T00:30:00Z"), false, time.Time{},
			`spec.rollout.windows[0].schedule: "0 0 30 2 *" never opens (no time matches it in the next five years)`},
		{"a window that never opens beside one that does", []fleeetv1.RolloutWindow{feb30, window("0 9 * * *", time.Hour, "")},
			utc("2026-03-02T08:00:00Z"), false, utc("2026-03-02T09:00:00Z"),
			`spec.rollout.windows[0].schedule: "0 0 30 2 *" never opens (no time matches it in the next five years)`},
		{"29 February opens in the next leap year", []fleeetv1.RolloutWindow{window("0 0 29 2 *", time.Hour, "")},
			utc("2026-03-02T00:00:00Z"), false, utc("2028-02-29T00:00:00Z"), ""},
		{"02:30 in Berlin is skipped on the day clocks go forward", []fleeetv1.RolloutWindow{window("30 2 * * *", 20*time.Minute, "Europe/Berlin")},
			utc("2026-03-29T01:35:00Z"), false, utc("2026-03-30T00:30:00Z"), ""},
		{"02:30 in Berlin opens on the day before", []fleeetv1.RolloutWindow{window("30 2 * * *", 20*time.Minute, "Europe/Berlin")},
			utc("2026-03-28T01:35:00Z"), true, time.Time{}, ""},
		{"02:30 in Berlin opens on the first 02:30 of the day clocks go back", []fleeetv1.RolloutWindow{window("30 2 * * *", 20*time.Minute, "Europe/Berlin")},
			utc("2026-10-25T00:35:00Z"), true, time.Time{}, ""},
		{"a window longer than its period is always open", []fleeetv1.RolloutWindow{window("0 * * * *", 90*time.Minute, "")},
			utc("2026-03-02T07:59:59Z"), true, time.Time{}, ""},
		{"a daily window of 25 hours is always open", []fleeetv1.RolloutWindow{window("0 9 * * *", 25*time.Hour, "Asia/Tokyo")},
			utc("2026-03-02T23:59:00Z"), true, time.Time{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ws, err := parse(tc.windows)
			g.Expect(err).NotTo(HaveOccurred())
			open, next := Open(ws, tc.now)
			g.Expect(open).To(Equal(tc.open))
			g.Expect(next.Equal(tc.next)).To(BeTrue(), "next %s, want %s", next, tc.next)
			g.Expect(Describe(NeverOpen(ws, tc.now))).To(Equal(tc.never))
		})
	}
}

// parse parses windows that must parse.
func parse(ws []fleeetv1.RolloutWindow) ([]Window, error) {
	parsed, problems := Parse(ws)
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", Describe(problems))
	}
	return parsed, nil
}
