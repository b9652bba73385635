package module

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestWindowsOpenOnTheirScheduleForTheirDuration(t *testing.T) {
	g := NewWithT(t)
	// Weekdays 09:00 to 11:00 in Berlin (UTC+1 in November).
	ws, err := parseWindows([]fleeetv1.RolloutWindow{{Schedule: "0 9 * * 1-5", Duration: metav1.Duration{Duration: 2 * time.Hour}, TimeZone: "Europe/Berlin"}})
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
		open, next := windowsOpen(ws, tc.now)
		g.Expect(open).To(Equal(tc.open), "at %s", tc.now)
		g.Expect(next.Equal(tc.next)).To(BeTrue(), "at %s: next %s, want %s", tc.now, next, tc.next)
	}
	open, _ := windowsOpen(nil, monday(3, 0))
	g.Expect(open).To(BeTrue(), "no window is always open")
}

func TestABadWindowNamesItsField(t *testing.T) {
	g := NewWithT(t)
	for _, tc := range []struct {
		w    fleeetv1.RolloutWindow
		want string
	}{
		{fleeetv1.RolloutWindow{Schedule: "every day", Duration: metav1.Duration{Duration: time.Hour}}, "spec.rollout.windows[0].schedule: "},
		{fleeetv1.RolloutWindow{Schedule: "0 9 * * *", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Mars/Olympus"}, "spec.rollout.windows[0].timeZone: "},
		{fleeetv1.RolloutWindow{Schedule: "0 9 * * *"}, "spec.rollout.windows[0].duration: must be positive"},
	} {
		_, err := parseWindows([]fleeetv1.RolloutWindow{tc.w})
		g.Expect(err).To(MatchError(HavePrefix(tc.want)))
	}
}
