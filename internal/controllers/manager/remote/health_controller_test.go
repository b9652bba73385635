package remote_test

import (
	"cmp"
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
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
// of grace, at a fixed time, against each kind of Lease it may have.
func TestHealthJudgesAPullRemoteByItsLease(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 123456000, time.UTC) // a Lease holds microseconds
	at := func(ago time.Duration) *metav1.MicroTime { return ptr.To(metav1.NewMicroTime(now.Add(-ago))) }
	for name, tc := range map[string]struct {
		push      bool
		lease     *coordinationv1.LeaseSpec
		connected metav1.ConditionStatus // "" when the health controller leaves it to the push controller
		reason    string
		message   string
		requeue   time.Duration // when the Remote is judged again
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

			h := &remote.HealthReconciler{Client: c, Recorder: events.NewFakeRecorder(10), Grace: time.Minute, Clock: clocktesting.NewFakePassiveClock(now)}
			result, err := h.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(r)})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.Get(t.Context(), client.ObjectKeyFromObject(r), r)).To(Succeed())
			if tc.push {
				// The push controller owns a push Remote's status; health writes none of it.
				g.Expect(r.Status).To(Equal(fleeetv1.RemoteStatus{}))
				g.Expect(result).To(Equal(ctrl.Result{}))
				return
			}
			g.Expect(r.Status.ObservedGeneration).To(BeEquivalentTo(3))
			g.Expect(result.RequeueAfter).To(Equal(tc.requeue))
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
// controller, recording the last renewal, and back online at its next
// heartbeat.
func TestAPullRemoteGoesOfflineAfterTheGracePeriodAndBackAtItsNextHeartbeat(t *testing.T) {
	g := NewWithT(t)
	r := pullRemote(t, tenant(t), "edge-1", nil)
	first := time.Now()
	heartbeat(t, r, first)
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
	// A renewal that changes nothing else need not be written at once,
	// but going offline records it. The status holds whole seconds.
	last := time.Now()
	if last.Sub(first) < time.Second {
		last = first.Add(time.Second)
	}
	heartbeat(t, r, last)

	judgedAs(metav1.ConditionFalse, fleeetv1.ReasonHeartbeatMissed)
	g.Expect(time.Since(online)).To(BeNumerically(">=", grace-time.Second), "not before the grace period ends")
	g.Expect(connected(g, r).Message).To(HaveSuffix("(grace period 2s)"))
	g.Expect(r.Status.LastHeartbeatTime.Time).To(BeTemporally("==", last.Truncate(time.Second)))

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

// renewal is the agent's default heartbeat interval (agent.DefaultHeartbeat).
const renewal = 40 * time.Second

// healthFixture is one pull Remote and its Lease, unrenewed as registration
// creates it, in a fake client, judged by a health controller on a clock
// the test moves, which records when it wrote the Remote's status.
type healthFixture struct {
	t      *testing.T
	client client.Client
	health *remote.HealthReconciler
	clock  *clocktesting.FakeClock
	remote *fleeetv1.Remote
	lease  *coordinationv1.Lease
	// writes are the clock's times of the health controller's status writes.
	writes []time.Time
	// away makes every status write fail as with the apiserver stopped;
	// hung makes it hang until its context ends, as with etcd stalled.
	away, hung bool
	// events are what the health controller recorded.
	events *events.FakeRecorder
}

// newHealthFixture judges with grace and the manager version v0.4.0.
func newHealthFixture(t *testing.T, grace time.Duration) *healthFixture {
	f := &healthFixture{t: t, clock: clocktesting.NewFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 123456000, time.UTC)),
		remote: &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge-1", Generation: 1}},
		lease:  &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge-1"}}}
	f.client = fake.NewClientBuilder().WithScheme(testenv.Scheme).WithObjects(f.remote, f.lease).WithStatusSubresource(f.remote).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if f.away {
				return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
			}
			if f.hung {
				<-ctx.Done()
				return ctx.Err()
			}
			if o := (&client.SubResourcePatchOptions{}).ApplyOptions(opts); o.FieldManager == status.HealthManager {
				f.writes = append(f.writes, f.clock.Now())
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}}).Build()
	f.events = events.NewFakeRecorder(100)
	f.health = &remote.HealthReconciler{Client: f.client, Recorder: f.events, Grace: grace, ManagerVersion: "v0.4.0", Clock: f.clock,
		WriteTimeout: 100 * time.Millisecond}
	return f
}

// heartbeatEvents drains the events recorded about the Remote's connection.
func (f *healthFixture) heartbeatEvents() []string {
	var got []string
	for {
		select {
		case e := <-f.events.Events:
			if strings.Contains(e, fleeetv1.ReasonHeartbeatMissed) || strings.Contains(e, fleeetv1.ReasonHeartbeatFresh) {
				got = append(got, e)
			}
		default:
			return got
		}
	}
}

// renew renews the Lease now, as the agent does.
func (f *healthFixture) renew() {
	f.lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(f.clock.Now()))
	NewWithT(f.t).Expect(f.client.Update(f.t.Context(), f.lease)).To(Succeed())
}

// reconcile runs the health controller twice, as a change and the Remote's
// own status write coming back run it, and returns the second result.
func (f *healthFixture) reconcile() ctrl.Result {
	g := NewWithT(f.t)
	var result ctrl.Result
	for range 2 {
		var err error
		result, err = f.health.Reconcile(f.t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.remote)})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(f.client.Get(f.t.Context(), client.ObjectKeyFromObject(f.remote), f.remote)).To(Succeed())
	return result
}

// connected is the Remote's Connected condition as last read.
func (f *healthFixture) connected() *metav1.Condition {
	c := apimeta.FindStatusCondition(f.remote.Status.Conditions, fleeetv1.ConnectedCondition)
	NewWithT(f.t).Expect(c).NotTo(BeNil())
	return c
}

// An agent renewing its Lease every 40 s for an idle hour costs the manager
// its first heartbeat's write and then only a refresh of lastHeartbeatTime
// once per DefaultHeartbeatRefresh: under 0.1 writes a minute, where
// copying every renewal wrote 1.5.
func TestAnIdleRemoteIsWrittenOnlyToRefreshItsHeartbeat(t *testing.T) {
	g := NewWithT(t)
	f := newHealthFixture(t, time.Minute)
	start := f.clock.Now()
	renewals := 0
	for ; f.clock.Since(start) < time.Hour; f.clock.Step(renewal) {
		f.renew()
		renewals++
		f.reconcile()
		g.Expect(f.connected().Status).To(Equal(metav1.ConditionTrue))
		g.Expect(f.clock.Since(f.remote.Status.LastHeartbeatTime.Time)).To(BeNumerically("<", remote.DefaultHeartbeatRefresh+time.Second),
			"lastHeartbeatTime within the refresh period of the Lease")
	}
	g.Expect(renewals).To(Equal(90))
	g.Expect(f.writes[0]).To(Equal(start), "the first heartbeat is written at once")
	g.Expect(len(f.writes)).To(BeNumerically(">", 1), "lastHeartbeatTime is refreshed")
	g.Expect(len(f.writes)).To(BeNumerically("<=", 6), "at most 0.1 writes a minute for an idle hour")
	for i := 1; i < len(f.writes); i++ {
		g.Expect(f.writes[i].Sub(f.writes[i-1])).To(BeNumerically(">=", remote.DefaultHeartbeatRefresh), "a refresh, not a renewal, writes")
		g.Expect(f.writes[i].Sub(f.writes[i-1])).To(BeNumerically("<", remote.DefaultHeartbeatRefresh+renewal), "the first renewal past the refresh period writes")
	}
}

// A Remote whose agent stops renewing its Lease gets no watch event, only
// the requeue its last reconcile asked for, at the moment the grace runs
// out: then it goes Offline, in one write recording the Lease's last
// renewal, which the renewals before it did not write, and says so once in
// a Warning event; its next renewal brings it back, with a Normal one.
func TestARemoteGoesOfflineWhenItsLeaseIsNotRenewedWithinTheGrace(t *testing.T) {
	g := NewWithT(t)
	grace := time.Minute
	f := newHealthFixture(t, grace)
	var result ctrl.Result
	for range 5 {
		f.renew()
		result = f.reconcile()
		f.clock.Step(renewal)
	}
	last := f.lease.Spec.RenewTime.Time
	g.Expect(result.RequeueAfter).To(Equal(grace+time.Second), "judged again as the grace runs out")
	g.Expect(f.writes).To(HaveLen(1), "renewals that change nothing write nothing")

	f.clock.SetTime(last.Add(grace))
	g.Expect(f.reconcile().RequeueAfter).To(Equal(time.Second))
	g.Expect(f.connected().Status).To(Equal(metav1.ConditionTrue), "online until the grace has passed")
	g.Expect(f.writes).To(HaveLen(1))

	f.clock.SetTime(last.Add(result.RequeueAfter))
	g.Expect(f.reconcile()).To(Equal(ctrl.Result{}))
	g.Expect(f.connected().Status).To(Equal(metav1.ConditionFalse))
	g.Expect(f.connected().Reason).To(Equal(fleeetv1.ReasonHeartbeatMissed))
	g.Expect(f.connected().Message).To(Equal("offline: no agent heartbeat since 2026-11-28T10:02:40Z (grace period 1m0s)"))
	g.Expect(f.remote.Offline()).To(BeTrue())
	g.Expect(f.remote.Status.LastHeartbeatTime.Time).To(BeTemporally("==", last.Truncate(time.Second)))
	g.Expect(f.writes).To(HaveLen(2), "one write going offline")
	g.Expect(f.heartbeatEvents()).To(ConsistOf(
		HavePrefix("Normal HeartbeatFresh online: agent heartbeat within the last 1m0s"),
		"Warning HeartbeatMissed offline: no agent heartbeat since 2026-11-28T10:02:40Z (grace period 1m0s)"))

	f.clock.Step(time.Hour)
	f.reconcile()
	g.Expect(f.writes).To(HaveLen(2), "none while it stays offline")
	g.Expect(f.heartbeatEvents()).To(BeEmpty(), "said once")

	f.renew()
	f.reconcile()
	g.Expect(f.connected().Status).To(Equal(metav1.ConditionTrue))
	g.Expect(f.heartbeatEvents()).To(ConsistOf(HavePrefix("Normal HeartbeatFresh online:")))
}

// The management apiserver away for longer than the grace stops renewals
// from arriving, not the cluster from running: the Remote stays Connected
// until the grace has passed since the manager last failed to write, so the
// agent's first renewal after the outage arrives in time; an agent that
// does not renew then goes Offline. A write that hangs, as with the
// management etcd stalled, gives up and counts the same: the verdict
// judged while no renewal could arrive is never written.
func TestARemoteIsNotJudgedOfflineForTheManagersOwnOutage(t *testing.T) {
	for _, outage := range []struct {
		name string
		on   func(f *healthFixture) *bool
		err  string
	}{
		{"refused", func(f *healthFixture) *bool { return &f.away }, "connection refused"},
		{"hung", func(f *healthFixture) *bool { return &f.hung }, context.DeadlineExceeded.Error()},
	} {
		t.Run(outage.name, func(t *testing.T) {
			g := NewWithT(t)
			grace := time.Minute
			f := newHealthFixture(t, grace)
			f.renew()
			f.reconcile()
			last := f.lease.Spec.RenewTime.Time

			*outage.on(f) = true
			f.clock.SetTime(last.Add(grace + time.Second)) // the requeue as the grace runs out
			_, err := f.health.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.remote)})
			g.Expect(err).To(MatchError(ContainSubstring(outage.err)))
			failed := f.clock.Now()

			*outage.on(f) = false
			f.clock.Step(30 * time.Second) // back, before the agent renews
			g.Expect(f.reconcile().RequeueAfter).To(Equal(grace - 30*time.Second + time.Second))
			g.Expect(f.connected().Status).To(Equal(metav1.ConditionTrue), "not offline for the manager's own outage")
			g.Expect(f.writes).To(HaveLen(1), "nothing written")
			g.Expect(f.heartbeatEvents()).NotTo(ContainElement(ContainSubstring("Warning")), "nothing said")

			f.clock.SetTime(failed.Add(grace + time.Second))
			f.reconcile()
			g.Expect(f.connected().Status).To(Equal(metav1.ConditionFalse), "offline once the grace has passed since the outage")
			g.Expect(f.connected().Message).To(ContainSubstring("no agent heartbeat since " + last.UTC().Truncate(time.Second).Format(time.RFC3339)))
		})
	}
}

// Each change of what the health controller says about a Remote is written
// at once, with the Lease's latest renewal as lastHeartbeatTime, and the
// renewals between them write nothing.
func TestHealthWritesTheRemoteOnEachTransitionWithItsLatestHeartbeat(t *testing.T) {
	g := NewWithT(t)
	grace := time.Minute
	f := newHealthFixture(t, grace)
	start := f.clock.Now()
	for _, step := range []struct {
		name      string
		do        func()
		written   bool
		connected metav1.ConditionStatus
		compat    metav1.ConditionStatus
		heartbeat time.Duration // lastHeartbeatTime, after start; -1 for none
	}{
		{name: "registered, never renewed", do: func() {}, written: true, connected: metav1.ConditionFalse, compat: metav1.ConditionUnknown, heartbeat: -1},
		{name: "first heartbeat", do: f.renew, written: true, connected: metav1.ConditionTrue, compat: metav1.ConditionUnknown},
		{name: "a renewal", do: func() { f.clock.Step(renewal); f.renew() }, connected: metav1.ConditionTrue, compat: metav1.ConditionUnknown},
		{name: "the agent reports its version", do: func() {
			g.Expect(status.Apply(t.Context(), f.client, f.remote, status.AgentManager, fleeetv1.RemoteStatus{AgentVersion: "v0.4.1"})).To(Succeed())
		}, written: true, connected: metav1.ConditionTrue, compat: metav1.ConditionTrue, heartbeat: renewal},
		{name: "another renewal", do: func() { f.clock.Step(renewal); f.renew() }, connected: metav1.ConditionTrue, compat: metav1.ConditionTrue, heartbeat: renewal},
		{name: "an agent out of the window", do: func() {
			g.Expect(status.Apply(t.Context(), f.client, f.remote, status.AgentManager, fleeetv1.RemoteStatus{AgentVersion: "v0.2.0"})).To(Succeed())
		}, written: true, connected: metav1.ConditionTrue, compat: metav1.ConditionFalse, heartbeat: 2 * renewal},
		{name: "the grace runs out", do: func() { f.clock.Step(grace + time.Second) }, written: true, connected: metav1.ConditionFalse, compat: metav1.ConditionFalse, heartbeat: 2 * renewal},
		{name: "back", do: f.renew, written: true, connected: metav1.ConditionTrue, compat: metav1.ConditionFalse, heartbeat: 2*renewal + grace + time.Second},
	} {
		writes := len(f.writes)
		step.do()
		f.reconcile()
		if step.written {
			g.Expect(f.writes).To(HaveLen(writes+1), step.name)
		} else {
			g.Expect(f.writes).To(HaveLen(writes), step.name)
		}
		g.Expect(f.connected().Status).To(Equal(step.connected), step.name)
		compat := apimeta.FindStatusCondition(f.remote.Status.Conditions, fleeetv1.AgentCompatibleCondition)
		g.Expect(compat).NotTo(BeNil(), step.name)
		g.Expect(compat.Status).To(Equal(step.compat), step.name)
		if step.heartbeat < 0 {
			g.Expect(f.remote.Status.LastHeartbeatTime).To(BeNil(), step.name)
		} else {
			g.Expect(f.remote.Status.LastHeartbeatTime).NotTo(BeNil(), step.name)
			g.Expect(f.remote.Status.LastHeartbeatTime.Time).To(BeTemporally("==", start.Add(step.heartbeat).Truncate(time.Second)), step.name)
		}
	}
}
