package status_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/status"
)

// TestWritersApplyOnlyWhatTheyOwn: writers sharing a Remote's status, each
// applying from a stale copy, keep each other's fields; a condition a writer
// stops applying goes, and only its own.
func TestWritersApplyOnlyWhatTheyOwn(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c := cluster
	ns := c.Namespace(t, "tenant", nil)
	remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}}
	g.Expect(c.Client.Create(ctx, remote)).To(Succeed())
	stale := remote.DeepCopy()

	cond := func(typ string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: "Test", Message: typ, ObservedGeneration: 1,
			LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))}
	}
	apply := func(owner string, st any) {
		g.Expect(status.Apply(ctx, c.Client, stale.DeepCopy(), owner, st)).To(Succeed())
	}
	apply(status.PushManager, fleeetv1.RemoteStatus{ObservedGeneration: 1, Mode: fleeetv1.PushMode,
		Conditions: []metav1.Condition{cond(fleeetv1.ConnectedCondition, metav1.ConditionFalse), cond(fleeetv1.StalledCondition, metav1.ConditionTrue)}})
	apply(status.RegistrationManager, fleeetv1.RemoteStatus{ObservedGeneration: 1,
		Conditions: []metav1.Condition{cond(fleeetv1.RegisteredCondition, metav1.ConditionTrue)}})
	apply(status.AgentManager, map[string]string{"agentVersion": "v1.2.3", "kubernetesVersion": "v1.36.3"})

	types := func() []string {
		got := &fleeetv1.Remote{}
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(remote), got)).To(Succeed())
		g.Expect(got.Status.Mode).To(Equal(fleeetv1.PushMode))
		g.Expect(got.Status.AgentVersion).To(Equal("v1.2.3"))
		var types []string
		for _, c := range got.Status.Conditions {
			types = append(types, c.Type)
		}
		return types
	}
	g.Expect(types()).To(ConsistOf(fleeetv1.ConnectedCondition, fleeetv1.StalledCondition, fleeetv1.RegisteredCondition))

	// The push controller connects: Stalled goes, Registered stays.
	apply(status.PushManager, fleeetv1.RemoteStatus{ObservedGeneration: 1, Mode: fleeetv1.PushMode,
		Conditions: []metav1.Condition{cond(fleeetv1.ConnectedCondition, metav1.ConditionTrue)}})
	g.Expect(types()).To(ConsistOf(fleeetv1.ConnectedCondition, fleeetv1.RegisteredCondition))

	// Registration applies no condition at all: Registered goes, Connected stays.
	apply(status.RegistrationManager, fleeetv1.RemoteStatus{ObservedGeneration: 1})
	g.Expect(types()).To(ConsistOf(fleeetv1.ConnectedCondition))

	// A deleted object is not an error.
	g.Expect(c.Client.Delete(ctx, remote)).To(Succeed())
	apply(status.RegistrationManager, fleeetv1.RemoteStatus{ObservedGeneration: 1})
}

func TestConditionsKeepsTheOwnedTypesInOrder(t *testing.T) {
	g := NewWithT(t)
	conds := []metav1.Condition{{Type: "Ready"}, {Type: "Registered"}, {Type: "Connected"}}
	g.Expect(status.Conditions(conds, "Connected", "Ready")).To(Equal([]metav1.Condition{{Type: "Ready"}, {Type: "Connected"}}))
	g.Expect(status.Conditions(conds, "Stalled")).To(BeEmpty())
}

// A field the CRD does not declare, which server-side apply refuses the
// whole status for, is left out when it is optional, and the rest written.
func TestApplyNewerLeavesOutWhatTheSchemaLacks(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := cluster.Namespace(t, "tenant", nil)
	remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}}
	g.Expect(cluster.Client.Create(ctx, remote)).To(Succeed())
	newer := map[string]any{"agentVersion": "v9.9.9", "readsSomethingNew": true}
	g.Expect(status.Apply(ctx, cluster.Client, remote.DeepCopy(), status.AgentManager, newer)).To(
		MatchError(ContainSubstring(".status.readsSomethingNew: field not declared in schema")), "refused whole")
	g.Expect(status.ApplyNewer(ctx, cluster.Client, remote.DeepCopy(), status.AgentManager, newer, "readsSomethingNew")).To(Succeed())
	g.Expect(newer).To(HaveKey("readsSomethingNew"), "the caller's map is left alone")
	got := &fleeetv1.Remote{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(remote), got)).To(Succeed())
	g.Expect(got.Status.AgentVersion).To(Equal("v9.9.9"))
}
