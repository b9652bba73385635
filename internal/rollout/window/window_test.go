package window

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestParseNamesEveryWindowThatCannotOpen(t *testing.T) {
	hour := metav1.Duration{Duration: time.Hour}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		w    fleeetv1.RolloutWindow
		want []string
	}{
		{"weekday mornings", fleeetv1.RolloutWindow{Schedule: "0 9 * * 1-5", Duration: hour, TimeZone: "Europe/Berlin"}, nil},
		{"leap day opens", fleeetv1.RolloutWindow{Schedule: "0 0 29 2 *", Duration: hour}, nil},
		{"30 February never opens", fleeetv1.RolloutWindow{Schedule: "0 0 30 2 *", Duration: hour}, []string{"spec.rollout.windows[0].schedule: \"0 0 30 2 *\" never opens"}},
		{"does not parse", fleeetv1.RolloutWindow{Schedule: "0 0 * * * * *", Duration: hour}, []string{"spec.rollout.windows[0].schedule: \"0 0 * * * * *\" does not parse"}},
		{"unknown zone", fleeetv1.RolloutWindow{Schedule: "0 9 * * *", Duration: hour, TimeZone: "Mars/Olympus"}, []string{"spec.rollout.windows[0].timeZone: \"Mars/Olympus\" is not"}},
		{"zero duration", fleeetv1.RolloutWindow{Schedule: "0 9 * * *"}, []string{"spec.rollout.windows[0].duration: must be positive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			parsed, problems := Parse([]fleeetv1.RolloutWindow{tc.w})
			problems = append(problems, NeverOpen(parsed, now)...)
			g.Expect(problems).To(HaveLen(len(tc.want)))
			for i, w := range tc.want {
				g.Expect(problems[i].String()).To(HavePrefix(w))
			}
			if len(tc.want) == 0 {
				g.Expect(parsed).To(HaveLen(1))
			}
		})
	}
}
