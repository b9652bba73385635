package shard

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/reach"
)

// Label marks membership Leases; its value is the binary's name, so the
// replicas of one binary see only each other.
const Label = "fleeet.dev/shard-member"

// InstanceAnnotation on a membership Lease names the process that last
// renewed it: a random value each process draws at start. Another value on
// a replica's own Lease, renewed after that replica started, means a second
// process was given the same --shard-identity.
const InstanceAnnotation = "fleeet.dev/shard-instance"

// Options configure a replica's membership.
type Options struct {
	// Identity names this replica among the members; its Lease is
	// <binary>-shard-<Identity>. The pod name: unique among live replicas.
	Identity string
	// LeaseDuration is how long a member counts as live after its last
	// renewal; the Lease is renewed every third of it. Zero turns sharding
	// off: the per-Remote controllers then run on the leader alone.
	LeaseDuration time.Duration
}

// Shard metrics: what this replica sees of the membership.
var (
	membersSeen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleeet_shard_members",
		Help: "Live manager replicas this replica sees, itself included.",
	})
	remotesOwned = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleeet_shard_remotes_owned",
		Help: "Remotes this replica's per-Remote controllers reconcile.",
	})
	identityShared = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleeet_shard_identity_shared",
		Help: "1 while another process renews this replica's membership Lease: two replicas were given one --shard-identity and both act on its Remotes.",
	})
	registerMetrics sync.Once
)

// Members is one replica's view of the membership: a runnable that holds
// and renews the replica's own Lease, deletes it on a graceful stop, reads
// the other members' from the cache, and enqueues the Remotes this replica
// gains into every sharded controller. A nil *Members is an unsharded
// manager: its controllers run on the leader and own every Remote.
type Members struct {
	client    client.Client
	namespace string
	binary    string
	identity  string
	duration  time.Duration
	// instance tells this process's renewals from those of another
	// process with the same identity; started is when it began renewing,
	// otherRenewed the last renewal by another seen since, shared whether
	// that is recent (see checkShared). Only the Start loop uses them.
	instance     string
	started      time.Time
	otherRenewed time.Time
	shared       bool

	// changed wakes the loop when a membership Lease changes.
	changed chan struct{}
	// outages are when a renewal last failed for want of the apiserver.
	outages reach.Outages

	mu      sync.RWMutex
	members []string
	queues  []workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// New returns binary's membership in namespace and adds it to mgr, or nil
// when o turns sharding off.
func New(ctx context.Context, mgr ctrl.Manager, binary, namespace string, o Options) (*Members, error) {
	if o.LeaseDuration <= 0 {
		return nil, nil
	}
	if err := o.validate(binary); err != nil {
		return nil, err
	}
	m := &Members{client: mgr.GetClient(), namespace: namespace, binary: binary, identity: o.Identity,
		duration: o.LeaseDuration, instance: rand.Text(), changed: make(chan struct{}, 1)}
	informer, err := mgr.GetCache().GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return nil, fmt.Errorf("watching membership Leases: %w", err)
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: m.leaseChanged,
		UpdateFunc: func(old, o any) {
			if !renewedLive(old, o) {
				m.leaseChanged(o)
			}
		},
		DeleteFunc: m.leaseChanged,
	}); err != nil {
		return nil, fmt.Errorf("watching membership Leases: %w", err)
	}
	registerMetrics.Do(func() { metrics.Registry.MustRegister(membersSeen, remotesOwned, identityShared) })
	return m, mgr.Add(m)
}

// validate checks o, sharding on, for binary's replicas.
func (o Options) validate(binary string) error {
	if o.LeaseDuration < 3*time.Second {
		return fmt.Errorf("--shard-lease-duration=%s: want at least 3s, so that renewals every third of it do not load the API, or 0 for no sharding", o.LeaseDuration)
	}
	if errs := validation.IsDNS1123Subdomain(leaseName(binary, o.Identity)); len(errs) > 0 {
		return fmt.Errorf("--shard-identity=%q: the membership Lease name %s is invalid: %s", o.Identity, leaseName(binary, o.Identity), strings.Join(errs, "; "))
	}
	return nil
}

// leaseName names the membership Lease of binary's replica identity.
func leaseName(binary, identity string) string { return binary + "-shard-" + identity }

func (m *Members) leaseName() string { return leaseName(m.binary, m.identity) }

// renewedLive reports whether a Lease update is a renewal of a member that
// was live, its own included: the members stay as they are, so the loop
// is not woken. Waking it for every renewal made each replica renew its
// own Lease again at once, without end.
func renewedLive(old, obj any) bool {
	before, ok1 := old.(*coordinationv1.Lease)
	after, ok2 := obj.(*coordinationv1.Lease)
	return ok1 && ok2 && ptr.Deref(before.Spec.HolderIdentity, "") == ptr.Deref(after.Spec.HolderIdentity, "") &&
		before.Labels[Label] == after.Labels[Label] && time.Now().Before(expiresAt(before))
}

// leaseChanged wakes the loop for a change of a membership Lease.
func (m *Members) leaseChanged(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Namespace != m.namespace || l.Labels[Label] != m.binary {
		return
	}
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// LastUnreachable is when this replica last failed to renew its Lease for
// want of the apiserver (reach.Unreachable): every third of the lease
// duration, so the manager learns of its apiserver's outages within
// seconds. Zero for never, and for no sharding (nil).
func (m *Members) LastUnreachable() time.Time {
	if m == nil {
		return time.Time{}
	}
	return m.outages.Last()
}

// NeedLeaderElection is false: every replica is a member.
func (m *Members) NeedLeaderElection() bool { return false }

// Start renews the replica's Lease every third of its duration and
// recomputes the members then and whenever a membership Lease changes
// other than by a live member's renewal, until ctx ends; then it deletes
// the Lease, so the others take over at once instead of after its expiry.
func (m *Members) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithValues("lease", m.namespace+"/"+m.leaseName())
	renew := time.NewTicker(m.duration / 3)
	defer renew.Stop()
	m.started = time.Now()
	for due := true; ; {
		if due {
			// A renewal hanging (etcd stalled) is an outage as much as one
			// refused: it gives up after a third of the lease duration.
			renewing, cancel := context.WithTimeout(ctx, m.duration/3)
			if err := m.renew(renewing); err != nil {
				m.outages.Observe(err, time.Now())
				logger.Error(err, "Renewing membership Lease")
			}
			cancel()
		}
		if err := m.rebalance(ctx); err != nil {
			logger.Error(err, "Reading shard members")
		}
		select {
		case <-ctx.Done():
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			own := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: m.namespace, Name: m.leaseName()}}
			if err := client.IgnoreNotFound(m.client.Delete(stop, own)); err != nil {
				logger.Error(err, "Deleting membership Lease; the others take over when it expires")
			}
			return nil
		case <-renew.C:
			due = true
		case <-m.changed: // the members changed; renew only if its own Lease went stale meanwhile
			due = m.ownStale(ctx)
		}
	}
}

// ownStale reports whether this replica's Lease, as cached, was last
// renewed more than a third of its duration ago, or is missing: the
// renewals the ticker made failed (the apiserver was away), and the
// replica should not wait for the next tick to be a member again.
func (m *Members) ownStale(ctx context.Context) bool {
	own := &coordinationv1.Lease{}
	if err := m.client.Get(ctx, client.ObjectKey{Namespace: m.namespace, Name: m.leaseName()}, own); err != nil {
		return true
	}
	return own.Spec.RenewTime == nil || time.Since(own.Spec.RenewTime.Time) > m.duration/3
}

// renew writes this replica's Lease with the current time and this
// process's instance, creating it if it is missing.
func (m *Members) renew(ctx context.Context) error {
	now := metav1.NewMicroTime(time.Now())
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}},"spec":{"renewTime":%q}}`,
		InstanceAnnotation, m.instance, now.Format(metav1.RFC3339Micro))
	own := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: m.namespace, Name: m.leaseName()}}
	err := m.client.Patch(ctx, own, client.RawPatch(types.MergePatchType, patch))
	if !apierrors.IsNotFound(err) {
		return err
	}
	own.Labels = map[string]string{Label: m.binary}
	own.Annotations = map[string]string{InstanceAnnotation: m.instance}
	own.Spec = coordinationv1.LeaseSpec{HolderIdentity: &m.identity, LeaseDurationSeconds: ptr.To(int32(m.duration.Seconds())),
		AcquireTime: &now, RenewTime: &now}
	return m.client.Create(ctx, own)
}

// rebalance reads the live members from the cache and, when they changed,
// takes them on and enqueues the Remotes this replica gained; it deletes
// Leases long expired, left by replicas that crashed.
func (m *Members) rebalance(ctx context.Context) error {
	leases := &coordinationv1.LeaseList{}
	if err := m.client.List(ctx, leases, client.InNamespace(m.namespace), client.MatchingLabels{Label: m.binary}); err != nil {
		return err
	}
	now := time.Now()
	var live []string
	var own *coordinationv1.Lease
	for i := range leases.Items {
		l := &leases.Items[i]
		if l.Name == m.leaseName() {
			own = l
		}
		switch expiry := expiresAt(l); {
		case now.Before(expiry):
			live = append(live, ptr.Deref(l.Spec.HolderIdentity, ""))
		case now.Sub(expiry) > 10*m.duration:
			// Conflict-checked: a member that came back keeps its Lease.
			err := m.client.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion})
			if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				return fmt.Errorf("deleting expired membership Lease %s: %w", l.Name, err)
			}
		}
	}
	m.checkShared(ctx, own, now)
	slices.Sort(live)
	live = slices.Compact(live)

	remotes := &fleeetv1.RemoteList{}
	if err := m.client.List(ctx, remotes, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	m.mu.Lock()
	before, queues := m.members, slices.Clone(m.queues)
	m.members = live
	m.mu.Unlock()
	var owned, gained []reconcile.Request
	for i := range remotes.Items {
		key := client.ObjectKeyFromObject(&remotes.Items[i])
		if Owner(key.String(), live) != m.identity {
			continue
		}
		owned = append(owned, reconcile.Request{NamespacedName: key})
		if Owner(key.String(), before) != m.identity {
			gained = append(gained, reconcile.Request{NamespacedName: key})
		}
	}
	membersSeen.Set(float64(len(live)))
	remotesOwned.Set(float64(len(owned)))
	if slices.Equal(before, live) {
		return nil
	}
	log.FromContext(ctx).Info("Shard members changed", "members", live, "remotesOwned", len(owned), "remotesGained", len(gained))
	for _, q := range queues {
		for _, r := range gained {
			q.Add(r)
		}
	}
	return nil
}

// checkShared reports, once each way, whether another process renews own,
// this replica's Lease (nil while the cache has none): whether a renewal
// since this process started, no longer ago than the lease duration,
// carried another instance. Both processes then own the same Remotes;
// their writes are conflict-checked, so nothing is corrupted, but the
// operator must give them distinct identities.
func (m *Members) checkShared(ctx context.Context, own *coordinationv1.Lease, now time.Time) {
	if own != nil && own.Spec.RenewTime != nil && own.Annotations[InstanceAnnotation] != m.instance &&
		own.Spec.RenewTime.After(m.started) && own.Spec.RenewTime.After(m.otherRenewed) {
		m.otherRenewed = own.Spec.RenewTime.Time
	}
	shared := now.Before(m.otherRenewed.Add(m.duration))
	if shared == m.shared {
		return
	}
	m.shared = shared
	if shared {
		identityShared.Set(1)
		log.FromContext(ctx).Error(nil, "Another process renews this replica's membership Lease: two replicas run with one --shard-identity, and both act on the Remotes it owns; give each its own (the default is unique)",
			"identity", m.identity)
		return
	}
	identityShared.Set(0)
	log.FromContext(ctx).Info("No other process renews this replica's membership Lease any more", "identity", m.identity)
}

// expiresAt is when l stops counting as live: its renewal plus its
// duration, by this replica's clock.
func expiresAt(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
}

// Owns reports whether this replica reconciles the Remote key: always for
// an unsharded manager, never while it sees no members (itself included).
func (m *Members) Owns(key types.NamespacedName) bool {
	if m == nil {
		return true
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return Owner(key.String(), m.members) == m.identity
}

// Complete builds the per-Remote controller b describes, reconciling
// concurrent Remotes at once with r. Sharded, it runs on every replica, is
// fed the Remotes this replica gains, and drops requests for Remotes it
// does not own; unsharded (m nil), it runs on the leader alone. Every
// request's name must be a Remote's, as those of the Remotes' plans are.
func (m *Members) Complete(b *builder.Builder, concurrent int, r reconcile.Reconciler) error {
	o := controller.Options{MaxConcurrentReconciles: max(1, concurrent)}
	if m == nil {
		return b.WithOptions(o).Complete(r)
	}
	o.NeedLeaderElection = ptr.To(false)
	return b.WithOptions(o).WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.queues = append(m.queues, q)
		return nil
	})).Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if !m.Owns(req.NamespacedName) {
			return reconcile.Result{}, nil
		}
		return r.Reconcile(ctx, req)
	}))
}
