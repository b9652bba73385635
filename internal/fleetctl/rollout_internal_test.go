package fleetctl

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
)

// rollout approve without a stage approves the one stage awaiting approval
// in whichever track it is, and asks for a name when two tracks await one.
func TestApproveFindsTheStageAwaitingApprovalInAnyTrack(t *testing.T) {
	g := NewWithT(t)
	m := &fleeetv1.Module{Spec: fleeetv1.ModuleSpec{Rollout: fleeetv1.Rollout{Stages: []fleeetv1.RolloutStage{
		{Name: "eu-canary", Track: "eu"},
		{Name: "us-canary", Track: "us", Approval: fleeetv1.ManualApproval},
		{Name: "ap-canary", Track: "ap", Approval: fleeetv1.ManualApproval}}}}}
	m.Name = "web"
	ro := &fleeetv1.RolloutStatus{Stage: "eu-canary", Tracks: []fleeetv1.TrackStatus{
		{Name: "eu", Stage: "eu-canary"}, {Name: "us", Stage: "us-canary"}, {Name: "ap", Stage: "ap-canary"}}, Approved: []string{"ap-canary"}}
	g.Expect(awaitingApproval(m, ro)).To(Equal("us-canary"))

	ro.Approved = nil
	_, err := awaitingApproval(m, ro)
	g.Expect(err).To(MatchError("module web: stages us-canary, ap-canary await approval, one in each track; name the one to approve"))

	g.Expect(awaitingApproval(m, &fleeetv1.RolloutStatus{Stage: "eu-canary"})).To(Equal("eu-canary"), "none awaits: the stage in progress, for approve to say why")
}

// rollout status names each stage's track and marks every stage in
// progress, one per track.
func TestRolloutStatusShowsEachTracksStageInProgress(t *testing.T) {
	g := NewWithT(t)
	var out strings.Builder
	g.Expect(printRollout(&out, fleetview.RolloutView{Module: "web", Version: "v2", Revision: "r2", Strategy: "RollingUpdate",
		State: "Unknown Progressing: 1 of 3 Remotes ready", Holding: "track eu: stage eu-canary awaits approval (fleetctl rollout approve)",
		Stages: []fleetview.StageView{
			{Name: "eu-canary", Track: "eu", Remotes: 1, Updated: 1, Ready: 1, Approval: "Manual", Current: true},
			{Name: "us-canary", Track: "us", Remotes: 2, Updated: 1, Current: true}}})).To(Succeed())
	g.Expect(out.String()).To(And(
		ContainSubstring("  holding: track eu: stage eu-canary awaits approval (fleetctl rollout approve)\n"),
		MatchRegexp(`eu-canary \(track eu\) \*\s+1\s+1\s+1\s+0\s+Manual`),
		MatchRegexp(`us-canary \(track us\) \*\s+2\s+1\s+0\s+0\s+\n`)))
}
