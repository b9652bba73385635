package version

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestJudgeSkewAllowsOneMinorBehindAndNeverAhead(t *testing.T) {
	for _, tc := range []struct {
		manager, agent string
		want           Skew
	}{
		{"v0.4.0", "v0.4.0", InWindow},
		{"v0.4.2", "v0.4.0", InWindow},
		{"v0.4.0", "v0.4.7", InWindow},
		{"v0.4.0", "v0.3.9", InWindow},
		{"0.4.0", "v0.3.0", InWindow},
		{"v1.0.0-rc.1", "v1.0.0", InWindow},
		{"dev", "dev", InWindow},
		{"demo", "demo", InWindow},
		{"v0.4.0", "v0.2.5", OutOfWindow},
		{"v0.4.0", "v0.5.0", OutOfWindow},
		{"v1.0.0", "v0.9.0", OutOfWindow},
		{"v1.1.0", "v2.1.0", OutOfWindow},
		{"v0.4.0", "", Unknown},
		{"v0.4.0", "dev", Unknown},
		{"dev", "v0.4.0", Unknown},
		{"demo", "demo-broken", Unknown},
	} {
		got, msg := JudgeSkew(tc.manager, tc.agent)
		NewWithT(t).Expect(got).To(Equal(tc.want), "manager %q, agent %q: %s", tc.manager, tc.agent, msg)
		NewWithT(t).Expect(msg).NotTo(BeEmpty())
	}
	long := "v0.2.5-" + strings.Repeat("x", 40000)
	skew, msg := JudgeSkew("v0.4.0", long)
	NewWithT(t).Expect(skew).To(Equal(OutOfWindow))
	NewWithT(t).Expect(msg).To(HaveLen(len("agent  is outside the window of manager v0.4.0: the agent may be at most 1 minor version behind the manager and never ahead")+shownRunes),
		"a cluster's report is quoted in part only")
	_, msg = JudgeSkew("v0.4.0", "v0.2.5")
	NewWithT(t).Expect(msg).To(Equal("agent v0.2.5 is outside the window of manager v0.4.0: the agent may be at most 1 minor version behind the manager and never ahead"))
}
