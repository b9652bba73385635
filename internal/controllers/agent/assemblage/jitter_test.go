package assemblage

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestJitterWaitsTheSameDelayFromFirstSightAndSpreadsAgents(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	j := newJitter(time.Minute, 1)
	first := j.wait("team-a/plan/app", "h1", now)
	g.Expect(first).To(BeNumerically(">=", 0))
	g.Expect(first).To(BeNumerically("<", time.Minute))
	g.Expect(j.wait("team-a/plan/app", "h1", now.Add(10*time.Second))).To(Equal(max(0, first-10*time.Second)),
		"the delay counts from when the spec was first seen")
	g.Expect(j.wait("team-a/plan/app", "h1", now.Add(time.Minute))).To(BeZero())

	j.done("team-a/plan/app")
	g.Expect(j.first).To(BeEmpty())
	g.Expect(newJitter(0, 1).wait("k", "h", now)).To(BeZero(), "no jitter, no wait")

	// A thousand agents seeing one new spec at once fetch it spread over
	// the whole minute, not in one second.
	perSecond := map[time.Duration]int{}
	for seed := range uint64(1000) {
		perSecond[newJitter(time.Minute, seed).wait("team-a/plan/app", "h2", now).Truncate(time.Second)]++
	}
	busiest := 0
	for _, n := range perSecond {
		busiest = max(busiest, n)
	}
	g.Expect(len(perSecond)).To(Equal(60), "every second of the minute is used")
	g.Expect(busiest).To(BeNumerically("<", 40), "no second takes more than a few percent of the fleet")
}
