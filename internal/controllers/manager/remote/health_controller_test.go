package remote_test

import (
	"cmp"
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/remote"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// TestHealthJudgesAPullRemoteByItsLease reconciles one Remote with a minute
// of grace against each kind of Lease it may have.
func TestHealthJudgesAPullRemoteByItsLease(t *testing.T) {
	now := time.Now()
	at := func(ago time.Duration) *metav1.MicroTime { return ptr.To(metav1.NewMicroTime(now.Add(-ago))) }
	for name, tc := range map[string]struct {
		push      bool
		lease     *coordinationv1.LeaseSpec
		connected metav1.ConditionStatus // "" when the health controller leaves it to the push controller
		reason    string
		message   string
		requeue   time.Duration // about when the Remote is judged again
		heartbeat *metav1.MicroTime
	}{
		"a push Remote":                {push: true},
		"no Lease":                     {connected: metav1.ConditionFalse, reason: fleeetv1.ReasonAwaitingAgent, message: "no heartbeat yet: the cluster's agent has not connected"},
		"a Lease never renewed":        {lease: &coordinationv1.LeaseSpec{}, connected: metav1.ConditionFalse, reason: fleeetv1.ReasonAwaitingAgent},
		"renewed 20s ago":              {lease: &coordinationv1.LeaseSpec{RenewTime: at(20 * time.Second)}, connected: metav1.ConditionTrue, reason: fleeetv1.ReasonHeartbeatFresh, message: "agent heartbeat within the last 1m0s", requeue: 41 * time.Second, heartbeat: at(20 * time.Second)},
		"acquired 50s ago, no renewal": {lease: &coordinationv1.LeaseSpec{AcquireTime: at(50 * time.Second)}, connected: metav1.ConditionTrue, reason: fleeetv1.ReasonHeartbeatFresh, requeue: 11 * time.Second, heartbeat: at(50 * time.Second)},
		"renewal wins over acquiry":    {lease: &coordinationv1.LeaseSpec{AcquireTime: at(time.Second), RenewTime: at(2 * time.Minute)}, connected: metav1.ConditionFalse, reason: fleeetv1.ReasonHeartbeatMissed, heartbeat: at(2 * time.Minute)},
		"renewed 2m ago": {lease: &coordinationv1.LeaseSpec{RenewTime: at(2 * time.Minute)}, connected: metav1.ConditionFalse, reason: fleeetv1.ReasonHeartbeatMissed,
			message: "offline: no agent heartbeat since " + now.Add(-2*time.Minute).UTC().Format(time.RFC3339) + " (grace period 1m0s)", heartbeat: at(2 * time.Minute)},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge-1", Generation: 3}}
			objs := []client.Object{r}
			if tc.push {
				r.Spec.KubeconfigRef = &fleeetv1.SecretKeyReference{Name: "edge-kubeconfig", Key: "value"}
			}
			if tc.lease != nil {
				objs = append(objs, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge-1"}, Spec: *tc.lease})
			}
			c := fake.NewClientBuilder().WithScheme(testenv.Scheme).WithObjects(objs...).WithStatusSubresource(r).Build()

			result, err := (&remote.HealthReconciler{Client: c, Recorder: events.NewFakeRecorder(10), Grace: time.Minute}).Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(r)})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.Get(t.Context(), client.ObjectKeyFromObject(r), r)).To(Succeed())
			if tc.push {
				// The push controller owns a push Remote's status; health writes none of it.
				g.Expect(r.Status).To(Equal(fleeetv1.RemoteStatus{}))
				g.Expect(result).To(Equal(ctrl.Result{}))
				return
			}
			g.Expect(r.Status.ObservedGeneration).To(BeEquivalentTo(3))
			g.Expect(result.RequeueAfter).To(BeNumerically("~", tc.requeue, time.Second))
			if tc.heartbeat == nil {
				g.Expect(r.Status.LastHeartbeatTime).To(BeNil())
			} else {
				g.Expect(r.Status.LastHeartbeatTime.Time).To(BeTemporally("~", tc.heartbeat.Time, time.Second))
			}
			g.Expect(r.Status.Mode).To(Equal(fleeetv1.PullMode))
			for _, typ := range []string{fleeetv1.ConnectedCondition, fleeetv1.ReadyCondition} {
				c := apimeta.FindStatusCondition(r.Status.Conditions, typ)
				g.Expect(c).NotTo(BeNil(), typ)
				g.Expect(c.Status).To(Equal(tc.connected), typ)
				g.Expect(c.Reason).To(Equal(tc.reason), typ)
				g.Expect(c.ObservedGeneration).To(BeEquivalentTo(3), typ)
				if tc.message != "" {
					g.Expect(c.Message).To(Equal(tc.message), typ)
				}
			}
		})
	}
}

// A Remote whose agent stops renewing its Lease is marked offline once the
// grace period has passed without a heartbeat, with no event to wake the
// controller, and back online at its next heartbeat.
func TestAPullRemoteGoesOfflineAfterTheGracePeriodAndBackAtItsNextHeartbeat(t *testing.T) {
	g := NewWithT(t)
	r := pullRemote(t, tenant(t), "edge-1", nil)
	heartbeat(t, r, time.Now())
	judgedAs := func(want metav1.ConditionStatus, reason string) {
		g.Eventually(func(g Gomega) {
			get(g, r)
			c := connected(g, r)
			g.Expect(c.Status).To(Equal(want))
			g.Expect(c.Reason).To(Equal(reason))
			g.Expect(r.Offline()).To(Equal(want == metav1.ConditionFalse))
			g.Expect(r.Status.ObservedGeneration).To(Equal(r.Generation))
		}, timeout, poll).Should(Succeed())
	}
	judgedAs(metav1.ConditionTrue, fleeetv1.ReasonHeartbeatFresh)
	online := time.Now()

	judgedAs(metav1.ConditionFalse, fleeetv1.ReasonHeartbeatMissed)
	g.Expect(time.Since(online)).To(BeNumerically(">=", grace-time.Second), "not before the grace period ends")
	g.Expect(connected(g, r).Message).To(HaveSuffix("(grace period 2s)"))

	heartbeat(t, r, time.Now())
	judgedAs(metav1.ConditionTrue, fleeetv1.ReasonHeartbeatFresh)
	g.Expect(r.Status.LastHeartbeatTime.Time).To(BeTemporally(">", online))
}

// TestHealthJudgesTheAgentVersionAgainstTheManagers reconciles a pull
// Remote reporting each kind of agent version, twice, and counts the
// Warning events.
func TestHealthJudgesTheAgentVersionAgainstTheManagers(t *testing.T) {
	for name, tc := range map[string]struct {
		manager, agent string
		status         metav1.ConditionStatus
		reason         string
		warned         bool
	}{
		"the manager's own version":  {manager: "v0.4.0", agent: "v0.4.0", status: metav1.ConditionTrue, reason: fleeetv1.ReasonAgentInWindow},
		"equal dev builds":           {manager: "dev", agent: "dev", status: metav1.ConditionTrue, reason: fleeetv1.ReasonAgentInWindow},
		"one minor behind":           {manager: "v0.4.0", agent: "v0.3.2", status: metav1.ConditionTrue, reason: fleeetv1.ReasonAgentInWindow},
		"two minors behind":          {manager: "v0.4.0", agent: "v0.2.0", status: metav1.ConditionFalse, reason: fleeetv1.ReasonAgentVersionSkew, warned: true},
		"ahead of the manager":       {manager: "v0.4.0", agent: "v0.5.0", status: metav1.ConditionFalse, reason: fleeetv1.ReasonAgentVersionSkew, warned: true},
		"not reported yet":           {manager: "v0.4.0", status: metav1.ConditionUnknown, reason: fleeetv1.ReasonAgentVersionUnknown},
		"a dev agent, a release one": {manager: "v0.4.0", agent: "dev", status: metav1.ConditionUnknown, reason: fleeetv1.ReasonAgentVersionUnknown},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge-1", Generation: 2},
				Status: fleeetv1.RemoteStatus{AgentVersion: tc.agent}}
			c := fake.NewClientBuilder().WithScheme(testenv.Scheme).WithObjects(r).WithStatusSubresource(r).Build()
			recorder := events.NewFakeRecorder(10)
			h := &remote.HealthReconciler{Client: c, Recorder: recorder, Grace: time.Minute, ManagerVersion: tc.manager}
			for range 2 {
				_, err := h.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(r)})
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(c.Get(t.Context(), client.ObjectKeyFromObject(r), r)).To(Succeed())
			cond := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.AgentCompatibleCondition)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(tc.status))
			g.Expect(cond.Reason).To(Equal(tc.reason))
			g.Expect(cond.Message).To(ContainSubstring(cmp.Or(tc.agent, "not reported")))
			g.Expect(cond.ObservedGeneration).To(BeEquivalentTo(2))
			close(recorder.Events)
			var warnings []string
			for e := range recorder.Events {
				warnings = append(warnings, e)
			}
			if tc.warned {
				g.Expect(warnings).To(ConsistOf(HavePrefix("Warning AgentVersionSkew agent "+tc.agent+" is outside the window of manager v0.4.0")), "one event, not one per reconcile")
			} else {
				g.Expect(warnings).To(BeEmpty())
			}
		})
	}
}

// An agent reporting a version outside the window turns its Remote's
// AgentCompatible False with one Warning event, leaves Connected alone, and
// turns it True again once upgraded.
func TestAnAgentOutsideTheSkewWindowIsFlaggedUntilUpgraded(t *testing.T) {
	g := NewWithT(t)
	r := pullRemote(t, tenant(t), "edge-1", nil)
	heartbeat(t, r, time.Now())
	report := func(agentVersion string) {
		g.Expect(status.Apply(t.Context(), cluster.Client, r, status.AgentManager, fleeetv1.RemoteStatus{AgentVersion: agentVersion})).To(Succeed())
	}
	judgedAs := func(want metav1.ConditionStatus, reason string) {
		g.Eventually(func(g Gomega) {
			get(g, r)
			c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.AgentCompatibleCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(want))
			g.Expect(c.Reason).To(Equal(reason))
			g.Expect(connected(g, r).Status).To(Equal(metav1.ConditionTrue))
		}, timeout, poll).Should(Succeed())
	}
	report("v0.2.1")
	judgedAs(metav1.ConditionFalse, fleeetv1.ReasonAgentVersionSkew)
	g.Eventually(func(g Gomega) []string {
		return warnings(g, cluster.Client, r.Namespace, "Remote", r.Name, fleeetv1.ReasonAgentVersionSkew)
	}, timeout, poll).Should(ConsistOf("agent v0.2.1 is outside the window of manager v0.4.0: the agent may be at most 1 minor version behind the manager and never ahead"))

	report("v0.3.0")
	judgedAs(metav1.ConditionTrue, fleeetv1.ReasonAgentInWindow)
	g.Expect(warnings(g, cluster.Client, r.Namespace, "Remote", r.Name, fleeetv1.ReasonAgentVersionSkew)).To(HaveLen(1), "no event for coming back into the window")
}

// TestHealthWritesEachHeartbeatOnce reconciles a Remote twice on one
// Lease renewal, as its own status write brings it back, and counts the
// status writes: the Lease's renewal time has microseconds, the status
// keeps seconds, and only the first reconcile may write.
func TestHealthWritesEachHeartbeatOnce(t *testing.T) {
	g := NewWithT(t)
	renewed := time.Now().Truncate(time.Second).Add(-10*time.Second + 123456*time.Microsecond)
	r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge-1"}}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge-1"},
		Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(renewed))}}
	writes := 0
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme).WithObjects(r, lease).WithStatusSubresource(r).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			writes++
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}}).Build()
	h := &remote.HealthReconciler{Client: c, Recorder: events.NewFakeRecorder(10), Grace: time.Minute}
	for range 2 {
		_, err := h.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(r)})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(writes).To(Equal(1), "status writes for one heartbeat")
	g.Expect(c.Get(t.Context(), client.ObjectKeyFromObject(r), r)).To(Succeed())
	g.Expect(r.Status.LastHeartbeatTime.Time).To(BeTemporally("==", renewed.Truncate(time.Second)))
}
