package fleetview

import (
	"testing"

	. "github.com/onsi/gomega"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// A Remote waiting in a rollout of several tracks is told the stage in
// progress in its own track, not the first track's.
func TestAWaitingRemoteIsToldTheStageInProgressInItsOwnTrack(t *testing.T) {
	g := NewWithT(t)
	m := &fleeetv1.Module{Spec: fleeetv1.ModuleSpec{Rollout: fleeetv1.Rollout{Stages: []fleeetv1.RolloutStage{
		{Name: "eu-canary", Track: "eu"}, {Name: "us-canary", Track: "us"}, {Name: "us-wide", Track: "us"}}}}}
	ro := &fleeetv1.RolloutStatus{Stage: "eu-canary", Tracks: []fleeetv1.TrackStatus{{Name: "eu", Stage: "eu-canary"}, {Name: "us", Stage: "us-canary"}}}
	g.Expect(trackStage(m, ro, "us-wide")).To(Equal("us-canary"))
	g.Expect(trackStage(m, ro, "eu-canary")).To(Equal("eu-canary"))
	g.Expect(trackStage(m, ro, "")).To(Equal("eu-canary"), "the Remotes in no stage wait for every track")
	g.Expect(trackStage(m, &fleeetv1.RolloutStatus{Stage: "eu-canary"}, "us-wide")).To(Equal("eu-canary"), "one track: the stage in progress")
}
