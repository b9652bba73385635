package runner

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
)

func TestLeaderElectionTimingsAreCheckedByFlag(t *testing.T) {
	cases := []struct {
		name string
		args []string
		err  string
	}{
		{name: "defaults"},
		{name: "fast handover", args: []string{"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms"}},
		{name: "renew deadline not shorter than the lease", args: []string{"--leader-election-renew-deadline=15s"},
			err: "--leader-election-renew-deadline=15s: must be shorter than --leader-election-lease-duration=15s"},
		{name: "one retry within the renew deadline", args: []string{"--leader-election-retry-period=9s"},
			err: "--leader-election-retry-period=9s: must be shorter than --leader-election-renew-deadline=10s by more than a fifth of itself"},
		{name: "no retry period", args: []string{"--leader-election-retry-period=0s"},
			err: "--leader-election-retry-period=0s: must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var o options
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.BindFlags(fs)
			g.Expect(fs.Parse(append([]string{"--leader-elect"}, tc.args...))).To(Succeed())
			err := o.validateLeaderElection()
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(tc.err))
		})
	}
}

func TestLeaderElectionDefaultsAreControllerRuntimes(t *testing.T) {
	g := NewWithT(t)
	var o options
	o.BindFlags(pflag.NewFlagSet("test", pflag.ContinueOnError))
	g.Expect([]time.Duration{o.LeaseDuration, o.RenewDeadline, o.RetryPeriod}).To(Equal([]time.Duration{15 * time.Second, 10 * time.Second, 2 * time.Second}))
}
