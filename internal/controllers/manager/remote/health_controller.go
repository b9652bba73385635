package remote

import (
	"cmp"
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/reach"
	"github.com/fleeet-dev/fleeet/internal/shard"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/version"
	"github.com/fleeet-dev/fleeet/internal/watches"
)

// DefaultHeartbeatRefresh is how far an idle pull Remote's
// status.lastHeartbeatTime may fall behind its Lease. Liveness is judged
// from the Lease, so the field is written with the status's transitions
// and otherwise once in this period: 15 minutes keep an idle cluster at one
// manager write in 15 minutes and a heartbeat interval (a refresh waits for
// the next renewal), under 0.1 a minute, 11 writes/s at 10,000 clusters
// where copying every 40 s renewal made 250. A kubelet, likewise, renews its node Lease every
// 10 s but reports an unchanged node status only every 5 minutes
// (nodeStatusReportFrequency); 5 minutes here would be 0.2 writes a
// minute.
const DefaultHeartbeatRefresh = 15 * time.Minute

// DefaultWriteTimeout bounds a health status write: far above a healthy
// apiserver's answer, and below the demo's and any sane offline grace.
const DefaultWriteTimeout = 10 * time.Second

// HealthReconciler marks pull Remotes Connected while their agent renews the Lease
// named after the Remote, in the Remote's namespace, and Offline once the
// Lease is older than Grace, and Grace has passed since the manager last
// failed to reach the apiserver; and AgentCompatible while the version the agent
// reports is within the skew window of ManagerVersion. It reads the Lease
// from the cache and writes the Remote only when its verdict changes, or
// to bring status.lastHeartbeatTime within HeartbeatRefresh of the Lease.
type HealthReconciler struct {
	// Shard says which Remotes this replica reconciles; nil for all of
	// them, on the leader alone.
	Shard *shard.Members
	// Concurrent is how many objects reconcile at once.
	Concurrent int
	// Client reads Remotes and Leases from the cache and writes Remote status.
	Client client.Client
	// Recorder records failed reconciles as events on the Remote.
	Recorder events.EventRecorder
	// Grace is how long after its last heartbeat, or after this controller's
	// last write that failed for want of the apiserver, a Remote counts as
	// Offline.
	Grace time.Duration
	// HeartbeatRefresh is how far status.lastHeartbeatTime may fall behind
	// the Lease while nothing else in the status changes; 0 is
	// DefaultHeartbeatRefresh.
	HeartbeatRefresh time.Duration
	// ManagerVersion is the manager's own version, which agents are judged
	// against (internal/version.Version).
	ManagerVersion string
	// Clock is what a Lease's age is judged by; nil is the real clock.
	Clock clock.PassiveClock
	// WriteTimeout bounds a status write; 0 is DefaultWriteTimeout. A
	// write that hangs (etcd stalled) fails and counts as an outage,
	// rather than landing a verdict judged while nothing could arrive.
	WriteTimeout time.Duration

	// outages are when, by Clock, a status write of this controller last
	// failed for want of the apiserver: see reconcileHeartbeat.
	outages reach.Outages
}

// SetupWithManager registers the controller; each Lease renewal reaches the
// Remote of the same name.
func (h *HealthReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return h.Shard.Complete(ctrl.NewControllerManagedBy(mgr).
		Named("remote-health").
		For(&fleeetv1.Remote{}).
		Watches(&coordinationv1.Lease{}, watches.SameName),
		h.Concurrent, h)
}

// Reconcile sets a Remote's mode and Connected, Ready and AgentCompatible
// conditions, with its last heartbeat, in one write when any changed, and
// comes back when a fresh heartbeat would go stale. A Lease renewal that
// changes none of them writes nothing (recordHeartbeat).
func (h *HealthReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	remote := &fleeetv1.Remote{}
	if err := h.Client.Get(ctx, req.NamespacedName, remote); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer func() { status.RecordFailure(h.Recorder, remote, retErr) }()
	if remote.Spec.KubeconfigRef != nil {
		return ctrl.Result{}, nil // no agent heartbeat: the push controller reports
	}
	before := remote.Status.DeepCopy()
	renewed, result, err := h.reconcileHeartbeat(ctx, remote)
	if err != nil {
		return ctrl.Result{}, err
	}
	h.reconcileAgentVersion(remote)
	remote.Status.ObservedGeneration = remote.Generation
	h.recordHeartbeat(remote, before, renewed)
	if equality.Semantic.DeepEqual(*before, remote.Status) {
		return result, nil
	}
	writing, cancel := context.WithTimeout(ctx, cmp.Or(h.WriteTimeout, DefaultWriteTimeout))
	defer cancel()
	if err := status.Apply(writing, h.Client, remote, status.HealthManager, fleeetv1.RemoteStatus{
		ObservedGeneration: remote.Generation,
		Mode:               fleeetv1.PullMode,
		LastHeartbeatTime:  remote.Status.LastHeartbeatTime,
		Conditions: status.Conditions(remote.Status.Conditions, fleeetv1.ConnectedCondition, fleeetv1.ReadyCondition,
			fleeetv1.AgentCompatibleCondition),
	}); err != nil {
		h.outages.Observe(err, h.clock().Now())
		return result, err
	}
	h.recordSkew(remote, apimeta.FindStatusCondition(before.Conditions, fleeetv1.AgentCompatibleCondition))
	h.recordConnection(ctx, remote, apimeta.FindStatusCondition(before.Conditions, fleeetv1.ConnectedCondition))
	return result, nil
}

// recordConnection logs, and records as an event on the Remote, the written
// Connected condition when it went offline (a Warning, HeartbeatMissed) or
// came back (HeartbeatFresh) since was: once per change, after the write,
// so a verdict the apiserver never stored is not announced.
func (h *HealthReconciler) recordConnection(ctx context.Context, remote *fleeetv1.Remote, was *metav1.Condition) {
	now := apimeta.FindStatusCondition(remote.Status.Conditions, fleeetv1.ConnectedCondition)
	if was != nil && was.Reason == now.Reason {
		return
	}
	switch now.Reason {
	case fleeetv1.ReasonHeartbeatMissed:
		log.FromContext(ctx).Info("Remote went offline", "reason", now.Message)
		h.Recorder.Eventf(remote, nil, corev1.EventTypeWarning, now.Reason, "CheckHeartbeat", "%s", now.Message)
	case fleeetv1.ReasonHeartbeatFresh:
		log.FromContext(ctx).Info("Remote is online")
		h.Recorder.Eventf(remote, nil, corev1.EventTypeNormal, now.Reason, "CheckHeartbeat", "online: %s", now.Message)
	}
}

// reconcileAgentVersion sets AgentCompatible from the version the agent
// reports against the manager's (see version.JudgeSkew for the window).
func (h *HealthReconciler) reconcileAgentVersion(remote *fleeetv1.Remote) {
	skew, msg := version.JudgeSkew(h.ManagerVersion, remote.Status.AgentVersion)
	cs, reason := metav1.ConditionTrue, fleeetv1.ReasonAgentInWindow
	switch skew {
	case version.OutOfWindow:
		cs, reason = metav1.ConditionFalse, fleeetv1.ReasonAgentVersionSkew
	case version.Unknown:
		cs, reason = metav1.ConditionUnknown, fleeetv1.ReasonAgentVersionUnknown
	}
	status.SetCondition(&remote.Status.Conditions, remote.Generation, fleeetv1.AgentCompatibleCondition, cs, reason, msg)
}

// recordSkew records a Warning event when the written AgentCompatible
// condition says the agent left the window, or moved within the outside of
// it, since was: once per change, never on a rewrite for another reason.
func (h *HealthReconciler) recordSkew(remote *fleeetv1.Remote, was *metav1.Condition) {
	now := apimeta.FindStatusCondition(remote.Status.Conditions, fleeetv1.AgentCompatibleCondition)
	if now.Reason != fleeetv1.ReasonAgentVersionSkew || (was != nil && was.Reason == now.Reason && was.Message == now.Message) {
		return
	}
	h.Recorder.Eventf(remote, nil, corev1.EventTypeWarning, now.Reason, "CheckAgentVersion", "%s", now.Message)
}

// reconcileHeartbeat judges a pull Remote by its Lease, as the cache holds
// it, and returns the Lease's last renewal, zero when it has none.
func (h *HealthReconciler) reconcileHeartbeat(ctx context.Context, remote *fleeetv1.Remote) (time.Time, ctrl.Result, error) {
	remote.Status.Mode = fleeetv1.PullMode
	lease := &coordinationv1.Lease{}
	if err := h.Client.Get(ctx, client.ObjectKeyFromObject(remote), lease); client.IgnoreNotFound(err) != nil {
		return time.Time{}, ctrl.Result{}, err
	}
	// The manager creates the Lease at registration; the agent renews it.
	var renewed time.Time
	if lease.Spec.RenewTime != nil {
		renewed = lease.Spec.RenewTime.Time
	} else if lease.Spec.AcquireTime != nil {
		renewed = lease.Spec.AcquireTime.Time
	}
	if renewed.IsZero() {
		setConnected(remote, metav1.ConditionFalse, fleeetv1.ReasonAwaitingAgent, "no heartbeat yet: the cluster's agent has not connected")
		return renewed, ctrl.Result{}, nil
	}
	// A heartbeat missed while the manager could not reach the apiserver
	// itself says nothing of the cluster: renewals could not arrive. So
	// the grace runs from the latest of the last renewal, this
	// controller's last failure to write and the shard membership's last
	// failure to renew (with the apiserver away past the grace, every
	// Remote would go Offline the moment it is back, before its agent
	// renews, and a rollout would see them all return at once; the
	// membership renews every few seconds, so it also sees outages too
	// short for any status write to run into).
	since := renewed
	for _, at := range []time.Time{h.outages.Last(), h.Shard.LastUnreachable()} {
		if at.After(since) {
			since = at
		}
	}
	age := h.clock().Since(since)
	if age <= h.Grace {
		setConnected(remote, metav1.ConditionTrue, fleeetv1.ReasonHeartbeatFresh,
			fmt.Sprintf("agent heartbeat within the last %s", h.Grace))
		// No event comes when the agent stops renewing: this requeue is
		// what turns the Remote Offline.
		return renewed, ctrl.Result{RequeueAfter: h.Grace - age + time.Second}, nil
	}
	setConnected(remote, metav1.ConditionFalse, fleeetv1.ReasonHeartbeatMissed,
		fmt.Sprintf("offline: no agent heartbeat since %s (grace period %s)", renewed.UTC().Format(time.RFC3339), h.Grace))
	return renewed, ctrl.Result{}, nil
}

func (h *HealthReconciler) clock() clock.PassiveClock {
	if h.Clock == nil {
		return clock.RealClock{}
	}
	return h.Clock
}

// recordHeartbeat sets status.lastHeartbeatTime to the Lease's last renewal
// when the status is written anyway (the Remote turning online or offline,
// its agent's verdict or its generation changing) or none is recorded, and
// otherwise only once the recorded one is HeartbeatRefresh behind.
// Connected is judged from the Lease itself, the field's readers need no
// finer time (whether a cluster ever reported, the recovery grace of days),
// and copying each renewal cost a Remote write per cluster per heartbeat.
func (h *HealthReconciler) recordHeartbeat(remote *fleeetv1.Remote, before *fleeetv1.RemoteStatus, renewed time.Time) {
	if renewed.IsZero() {
		return
	}
	// The status holds whole seconds (metav1.Time). Compared at the Lease's
	// microseconds, the heartbeat this controller just wrote would look new
	// again when its own write brings the Remote back.
	at := metav1.NewTime(renewed.Truncate(time.Second))
	last := remote.Status.LastHeartbeatTime
	if last == nil || at.Sub(last.Time) >= cmp.Or(h.HeartbeatRefresh, DefaultHeartbeatRefresh) ||
		!equality.Semantic.DeepEqual(*before, remote.Status) {
		remote.Status.LastHeartbeatTime = &at
	}
}

func setConnected(remote *fleeetv1.Remote, cs metav1.ConditionStatus, reason, msg string) {
	for _, typ := range []string{fleeetv1.ConnectedCondition, fleeetv1.ReadyCondition} {
		status.SetCondition(&remote.Status.Conditions, remote.Generation, typ, cs, reason, msg)
	}
}
