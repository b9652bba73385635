package module_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// Two tracks on a real apiserver: eu's canary awaits its approval while
// us's stages go on, and the Module's status says where each track is.
func TestTracksOfOneRolloutAdvanceIndependently(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	online := []string{"eu-1", "eu-2", "us-1", "us-2"}
	for _, name := range online {
		fleettest.NewRemote(t, cluster.Client, ns, name, map[string]string{"remote": name}, true)
	}
	stage := func(name, track string, remotes ...string) fleeetv1.RolloutStage {
		return fleeetv1.RolloutStage{Name: name, Track: track, Selector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "remote", Operator: metav1.LabelSelectorOpIn, Values: remotes}}}}
	}
	canary := stage("eu-canary", "eu", "eu-1")
	canary.Approval = fleeetv1.ManualApproval
	m := fleettest.NewModule("v1", &metav1.LabelSelector{})
	m.Namespace = ns
	m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, Stages: []fleeetv1.RolloutStage{
		canary, stage("eu-rest", "eu", "eu-2"), stage("us-canary", "us", "us-1"), stage("us-rest", "us", "us-2")}}
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	ready := func(string, string) fleeetv1.SyncState { return fleeetv1.SyncReady }
	held := func(g Gomega) map[string]string { return heldTags(g, ns, online) }
	driveUntil(g, ns, online, ready, func(g Gomega) {
		g.Expect(held(g)).To(HaveEach("v1"))
	})

	patchModule(g, ns, `{"spec":{"sync":{"source":{"git":{"tag":"v2"}}}}}`)
	driveUntil(g, ns, online, ready, func(g Gomega) {
		g.Expect(held(g)).To(Equal(map[string]string{"eu-1": "v2", "eu-2": "v1", "us-1": "v2", "us-2": "v2"}))
		ro := fleettest.ModuleStatus(g, cluster.Client, ns).Status.Rollout
		g.Expect(ro.Tracks).To(Equal([]fleeetv1.TrackStatus{
			{Name: "eu", Stage: "eu-canary", Holding: "stage eu-canary awaits approval (fleetctl rollout approve)"},
			{Name: "us", Stage: "us-rest"}}))
		g.Expect(ro.Holding).To(Equal("track eu: stage eu-canary awaits approval (fleetctl rollout approve)"))
	})
	approve(g, ns, "eu-canary")
	driveUntil(g, ns, online, ready, func(g Gomega) {
		g.Expect(held(g)).To(HaveEach("v2"))
	})
}
