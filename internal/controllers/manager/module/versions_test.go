package module_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/versions"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// TestAVersionPolicyRollsNewTagsOutThroughStagesAndNeverPicksARolledBackOneAgain:
// tags pushed to a real git server are picked by the Module's version policy
// and roll out through its two stages with no one bumping the version; a
// tag that fails on the canary is rolled back, never reaches the later
// stage and is not picked again; the next tag is.
func TestAVersionPolicyRollsNewTagsOutThroughStagesAndNeverPicksARolledBackOneAgain(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	git := testenv.NewGitServer(t)
	deploy := func(tag string) map[string]string {
		return map[string]string{"deploy/app.yaml": "kind: ConfigMap\nmetadata:\n  name: app-" + tag + "\n"}
	}
	git.Commit(t, "app", deploy("a"), "v1.0.0")
	url, _ := git.Commit(t, "app", deploy("b"), "v1.1.0")
	online := []string{"canary-1", "rest-1", "rest-2"}
	for _, name := range online {
		fleettest.NewRemote(t, cluster.Client, ns, name, map[string]string{"canary": fmt.Sprint(name == "canary-1")}, true)
	}
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
	m.Namespace = ns
	m.Spec.Sync.Source.Git.URL = url
	m.Spec.VersionPolicy = &fleeetv1.VersionPolicy{Semver: "^1"}
	m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, OnFailure: fleeetv1.RollbackOnFailure,
		Stages: []fleeetv1.RolloutStage{{Name: "canary", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"canary": "true"}}}}}
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())

	decide := func(_, tag string) fleeetv1.SyncState {
		if tag == "v1.2.0" {
			return fleeetv1.SyncFailed
		}
		return fleeetv1.SyncReady
	}
	everywhere := func(tag string) func(Gomega) {
		return func(g Gomega) {
			for _, name := range online {
				g.Expect(heldTag(fleettest.Proxy(g, cluster.Client, ns, name))).To(Equal(tag), name)
			}
		}
	}
	newest := func(g Gomega, version string, outcome fleeetv1.RolloutOutcome) {
		h := fleettest.ModuleStatus(g, cluster.Client, ns).Status.History
		g.Expect(h).NotTo(BeEmpty())
		g.Expect(h[0].Version).To(Equal(version))
		g.Expect(h[0].Outcome).To(Equal(outcome))
	}
	look := func() {
		patchModule(g, ns, fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, versions.RequestedAtAnnotation, time.Now().Format(time.RFC3339Nano)))
	}
	driveUntil(g, ns, online, decide, func(g Gomega) {
		everywhere("v1.1.0")(g)
		newest(g, "v1.1.0", fleeetv1.RolloutSucceeded)
	})
	history := watchHeldBy(t, ns, heldTag)

	git.Commit(t, "app", deploy("c"), "v1.2.0")
	look()
	driveUntil(g, ns, online, decide, func(g Gomega) {
		everywhere("v1.1.0")(g)
		newest(g, "v1.2.0", fleeetv1.RolloutRolledBack)
	})
	g.Expect(history.of("canary-1")).To(Equal([]string{"v1.1.0", "v1.2.0", "v1.1.0"}))
	g.Expect(history.of("rest-1")).To(Equal([]string{"v1.1.0"}), "a later stage never held the rolled-back tag")
	g.Expect(history.of("rest-2")).To(Equal([]string{"v1.1.0"}))

	look()
	g.Eventually(func(g Gomega) {
		m := fleettest.ModuleStatus(g, cluster.Client, ns)
		c := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.VersionResolvedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Message).To(HavePrefix("the sync holds v1.2.0, which was rolled back; v1.1.0"))
		g.Expect(m.Status.VersionPolicy.Skipped).To(Equal([]string{"v1.2.0"}))
	}, timeout, poll).Should(Succeed())
	g.Consistently(everywhere("v1.1.0"), "2s", poll).Should(Succeed())

	git.Commit(t, "app", deploy("d"), "v1.2.1")
	look()
	driveUntil(g, ns, online, decide, func(g Gomega) {
		everywhere("v1.2.1")(g)
		newest(g, "v1.2.1", fleeetv1.RolloutSucceeded)
	})
	g.Expect(history.of("rest-1")).To(Equal([]string{"v1.1.0", "v1.2.1"}))
}
