package fleetview

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestTheRolloutViewSaysWhatAVersionPolicyHasPending(t *testing.T) {
	g := NewWithT(t)
	m := &fleeetv1.Module{}
	g.Expect(versionPolicy(m, "v1.0.0")).To(BeEmpty(), "no policy, nothing said")

	m.Spec.VersionPolicy = &fleeetv1.VersionPolicy{Semver: "^1"}
	g.Expect(versionPolicy(m, "v1.0.0")).To(Equal(`"^1"; not resolved yet`))

	m.Status.VersionPolicy = &fleeetv1.VersionPolicyStatus{Available: "v1.2.0", Skipped: []string{"v1.2.0"}}
	m.Status.Conditions = []metav1.Condition{{Type: fleeetv1.VersionResolvedCondition, Status: metav1.ConditionTrue,
		Reason: fleeetv1.ReasonVersionPicked, Message: "the sync holds v1.1.0"}}
	g.Expect(versionPolicy(m, "v1.1.0")).To(Equal(
		`"^1", pending v1.2.0 (rolled back, not picked again); True VersionPicked: the sync holds v1.1.0`))

	m.Status.VersionPolicy = &fleeetv1.VersionPolicyStatus{Available: "v1.1.0"}
	g.Expect(versionPolicy(m, "v1.1.0")).To(Equal(`"^1"; True VersionPicked: the sync holds v1.1.0`), "nothing pending once the sync holds it")
}
