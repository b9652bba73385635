package bootstrap

import (
	"testing"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestReachNamesTheFirstFewUnreachableRemotesInOrder(t *testing.T) {
	g := NewWithT(t)
	bm := &fleeetv1.BootstrapModule{}
	reconcileReach(bm, []string{"g", "b", "f", "a", "e", "c", "d"})
	g.Expect(bm.Status.Unreachable).To(BeEquivalentTo(7))
	g.Expect(apimeta.FindStatusCondition(bm.Status.Conditions, fleeetv1.RemotesReachableCondition).Message).To(Equal(
		"not applied to the selected pull Remotes, which the management cluster cannot reach (spec.selector): a, b, c, d, e and 2 more"))
}
