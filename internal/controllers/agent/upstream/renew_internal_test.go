package upstream

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fleeet-dev/fleeet/internal/credential"
)

// A token is replaced at 80% of its life, or within 80% of the link's
// lifetime when it was minted to live longer (the setting was shortened
// since the agent last renewed).
func TestATokenIsRenewedWithinTheLinksLifetime(t *testing.T) {
	obtained := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		expiresAt time.Time
		lifetime  time.Duration
		want      time.Time
	}{
		"a day's token, a day's lifetime":        {obtained.Add(24 * time.Hour), credential.Lifetime, obtained.Add(19*time.Hour + 12*time.Minute)},
		"a day's token, lifetime cut to an hour": {obtained.Add(24 * time.Hour), time.Hour, obtained.Add(48 * time.Minute)},
		"an hour's token, an hour's lifetime":    {obtained.Add(time.Hour), time.Hour, obtained.Add(48 * time.Minute)},
		"a token about to expire":                {obtained.Add(10 * time.Second), time.Hour, obtained.Add(8 * time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			l := &link{lifetime: tc.lifetime}
			l.token.Store(&credential.Token{Value: "t", ExpiresAt: tc.expiresAt})
			NewWithT(t).Expect(l.renewAt(obtained)).To(Equal(tc.want))
		})
	}
}
