package helmhooks

import (
	"testing"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// The hooks' passing paths run in test/ct, in the charts' own Pods; these
// are the ways each must fail, against a real apiserver with no fleet
// manager or agent.
func TestHooksFailSayingWhatIsWrong(t *testing.T) {
	ctx := t.Context()
	c := testenv.StartCluster(t, "hooks")

	t.Run("admission fails where no webhook judges Modules", func(t *testing.T) {
		err := admission(ctx, c.Client, c.Namespace(t, "plain", nil))
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("fleeet's admission webhook does not judge Module writes there")))
	})

	release := c.Namespace(t, "release", nil)
	up := &fleeetv1.Upstream{
		ObjectMeta: metav1.ObjectMeta{Namespace: release, Name: "team-a"},
		Spec: fleeetv1.UpstreamSpec{
			Management:  fleeetv1.ManagementEndpoint{URL: "https://management.example.com", Namespace: "team-a"},
			ClusterName: "edge-1", ServiceAccountName: "fleeet-tenant",
		},
	}
	NewWithT(t).Expect(c.Client.Create(ctx, up)).To(Succeed())

	t.Run("registered fails while an Upstream is not Ready, with its conditions", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(registered(ctx, c.Client, c.Namespace(t, "empty", nil))).To(MatchError(ContainSubstring("no Upstream in namespace")))
		apimeta.SetStatusCondition(&up.Status.Conditions, metav1.Condition{Type: fleeetv1.RegisteredCondition,
			Status: metav1.ConditionFalse, Reason: fleeetv1.ReasonRegistrationRefused, Message: "the token is used up"})
		g.Expect(c.Client.Status().Update(ctx, up)).To(Succeed())
		g.Expect(registered(ctx, c.Client, release)).To(MatchError(
			"Upstream team-a is not Ready; Registered=False RegistrationRefused: the token is used up"))
	})

	// held creates, in a fresh namespace, an Assemblage the agent's
	// finalizer holds.
	held := func(g Gomega, t *testing.T, prefix string) (string, *fleeetv1.Assemblage) {
		tenant := c.Namespace(t, prefix, nil)
		asm := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "team-a",
			Finalizers: []string{fleeetv1.AssemblageFinalizer}}}
		g.Expect(c.Client.Create(ctx, asm)).To(Succeed())
		return tenant, asm
	}

	t.Run("uninstall deletes the Upstreams, then waits for the Assemblages to go", func(t *testing.T) {
		g := NewWithT(t)
		tenant, asm := held(g, t, "tenant")
		g.Expect(uninstall(ctx, c.Client, release, []string{tenant}, false)).To(MatchError(
			"waiting for the agent to remove the Flux objects of Assemblages " + tenant + "/team-a"))
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(up), up)).NotTo(Succeed(), "the Upstream is gone")
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(asm), asm)).To(Succeed())
		g.Expect(asm.DeletionTimestamp).NotTo(BeNil(), "the Assemblage is being deleted")

		// The agent lets it go once its Flux objects are gone.
		asm.Finalizers = nil
		g.Expect(c.Client.Update(ctx, asm)).To(Succeed())
		g.Expect(uninstall(ctx, c.Client, release, []string{tenant}, false)).To(Succeed())
	})

	t.Run("uninstall keeping workloads marks each Assemblage to leave them before deleting it", func(t *testing.T) {
		g := NewWithT(t)
		tenant, asm := held(g, t, "kept")
		g.Expect(uninstall(ctx, c.Client, release, []string{tenant}, true)).To(MatchError(
			ContainSubstring("waiting for the agent to remove the Flux objects of Assemblages " + tenant + "/team-a")))
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(asm), asm)).To(Succeed())
		g.Expect(asm.DeletionTimestamp).NotTo(BeNil(), "the Assemblage is being deleted")
		g.Expect(asm.Annotations).To(HaveKeyWithValue(fleeetv1.OrphanAnnotation, "true"))
		asm.Finalizers = nil
		g.Expect(c.Client.Update(ctx, asm)).To(Succeed())
		g.Expect(uninstall(ctx, c.Client, release, []string{tenant}, true)).To(Succeed())
	})
}
