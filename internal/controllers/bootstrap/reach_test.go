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
		"7 selected pull Remotes are not applied to, since a BootstrapModule reaches only push Remotes (spec.selector): a, b, c, d, e and 2 more"))
}
