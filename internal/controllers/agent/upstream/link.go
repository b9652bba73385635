package upstream

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/delivery"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/mirror"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/status"
)

// watchTimeout is how long each watch on the management cluster stays
// open before it is renewed; long, so an idle agent makes almost no requests.
const watchTimeout = time.Hour

// requestTimeout bounds each request to the management cluster other than watches.
const requestTimeout = 15 * time.Second

// maxBackoff caps the wait between attempts while the management cluster
// cannot be reached.
const maxBackoff = time.Minute

// link is one Upstream's connection to its management namespace. It follows
// the cluster's ProxyAssemblage and Remote by name, renews the Lease as
// heartbeat and the credential before it expires, and calls notify whenever
// what it knows changes. It never touches the downstream cluster except
// through store, which keeps a renewed credential.
type link struct {
	ns, cluster string
	generation  int64
	client      client.WithWatch
	token       atomic.Pointer[credential.Token]
	heartbeat   time.Duration
	// lifetime is how long each token the link mints lives.
	lifetime time.Duration
	versions Versions
	// labels are the Upstream's spec.labels, which the agent requests on
	// its Remote.
	labels      map[string]string
	inspectFlux func(context.Context) (fleeetv1.FluxStatus, flux.Compatibility)
	store       func(context.Context, credential.Token) error
	notify      func()
	log         logr.Logger
	stop        context.CancelFunc

	mu    sync.Mutex
	state linkState
	// parts are the further parts of the cluster's plan as last read,
	// parts[k] being part k; read again only when part 0 lists another
	// revision for them.
	parts [fleeetv1.MaxPlanParts]*fleeetv1.ProxyAssemblage
	// content holds the CompiledSyncs the plan names, read through
	// readCompiledSync; after each plan mirrored, only those it names.
	content plancontent.Cache
}

// linkState is what a link knows about the management cluster.
type linkState struct {
	// pa is the last ProxyAssemblage seen; nil until one is.
	pa *fleeetv1.ProxyAssemblage
	// err is the last failure to talk to the management cluster, nil once a
	// request succeeded after it.
	err error
	// revoked says why the cluster's credential no longer works; the link
	// has stopped.
	revoked string
	// unauthorized says the management cluster rejected the credential
	// (HTTP 401), which recovery may mend, rather than the Remote being gone.
	unauthorized bool
	// contact is when a request last succeeded.
	contact time.Time
	// flux is what the cluster's Flux serves; nil until first read.
	flux *fluxReport
	// bundle holds the Secrets delivered to the cluster, by name, as its
	// bundle last read held them; nil until read, empty when there is none.
	bundle map[string]delivery.Item
	// labels is the Remote's LabelsApplied condition, the manager's answer
	// to the labels the agent requests; nil until it answers.
	labels *metav1.Condition
}

// fluxReport is what the agent found of the cluster's Flux.
type fluxReport struct {
	status fleeetv1.FluxStatus
	compat flux.Compatibility
}

func (r fluxReport) equal(o fluxReport) bool {
	return r.compat == o.compat && equality.Semantic.DeepEqual(r.status, o.status)
}

// Versions are what the agent reports about itself on its Remote.
type Versions struct {
	Agent      string
	Kubernetes string
}

// managementConfig is a client configuration for the Upstream's
// management API whose bearer token is read at every request from token.
func managementConfig(up *fleeetv1.Upstream, token func() string) *rest.Config {
	return &rest.Config{
		Host:            up.Spec.Management.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: up.Spec.Management.CABundle},
		UserAgent:       "fleet-agent",
		QPS:             5,
		Burst:           10,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return bearer{next: rt, token: token}
		},
	}
}

// bearer sets the current token on each request, so a renewed credential
// takes effect without rebuilding clients or reopening watches.
type bearer struct {
	next  http.RoundTripper
	token func() string
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token())
	return b.next.RoundTrip(req)
}

// start runs the link's loops until stop is called or the credential is
// found revoked.
func (l *link) start(obtained time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	go l.follow(ctx, &fleeetv1.ProxyAssemblageList{}, l.cluster, false, func(o client.Object) {
		pa, _ := o.(*fleeetv1.ProxyAssemblage)
		l.update(func(s *linkState) { s.pa = pa })
	})
	// A manager older than deliveries grants no access to the bundle.
	go l.follow(ctx, &corev1.SecretList{}, fleeetv1.DeliveryBundleName(l.cluster), true, l.applyBundle)
	go l.follow(ctx, &fleeetv1.RemoteList{}, l.cluster, false, func(o client.Object) {
		remote, _ := o.(*fleeetv1.Remote)
		if remote == nil {
			l.revoke(fmt.Sprintf("Remote %s/%s was deleted from the management cluster: this cluster is revoked", l.ns, l.cluster), false)
			return
		}
		// The manager deletes the cluster's identity once the Remote is
		// being deleted: the refusal that follows is the revocation, not
		// a credential to recover.
		if remote.DeletionTimestamp != nil {
			l.revoke(fmt.Sprintf("Remote %s/%s is being deleted from the management cluster: this cluster is revoked", l.ns, l.cluster), false)
			return
		}
		answer := apimeta.FindStatusCondition(remote.Status.Conditions, fleeetv1.LabelsAppliedCondition)
		if before := l.snapshot().labels; answer != nil && (before == nil || *before != *answer) {
			l.update(func(s *linkState) { s.labels = answer.DeepCopy() })
		}
	})
	go l.beat(ctx)
	go l.renew(ctx, obtained)
}

func (l *link) snapshot() linkState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

func (l *link) update(change func(*linkState)) {
	l.mu.Lock()
	change(&l.state)
	l.mu.Unlock()
	l.notify()
}

// succeeded records a successful request; it notifies only when the link
// was failing, so steady heartbeats cause no reconciles.
func (l *link) succeeded() {
	l.mu.Lock()
	wasFailing := l.state.err != nil || l.state.contact.IsZero()
	l.state.err, l.state.contact = nil, time.Now()
	l.mu.Unlock()
	if wasFailing {
		l.notify()
	}
}

// failed records a failed request and returns the next backoff. A rejected
// credential means the cluster was revoked (or its credential expired).
func (l *link) failed(err error, backoff time.Duration) time.Duration {
	if apierrors.IsUnauthorized(err) {
		l.revoke(fmt.Sprintf("the management cluster rejects this cluster's credential (%v): the cluster was revoked or its credential expired", err), true)
		return maxBackoff
	}
	l.log.Info("Management cluster request failed", "error", err.Error(), "retryIn", backoff)
	l.update(func(s *linkState) { s.err = err })
	return min(max(2*backoff, time.Second), maxBackoff)
}

// revoke stops the link for reason; unauthorized says the management
// cluster refused the credential, which recovery may mend. The first
// reason stands: a refusal that follows the Remote's deletion is not one
// to recover from.
func (l *link) revoke(reason string, unauthorized bool) {
	l.mu.Lock()
	first := l.state.revoked == ""
	if first {
		l.state.revoked, l.state.unauthorized = reason, unauthorized
	}
	l.mu.Unlock()
	if !first {
		return
	}
	l.log.Info("Credential revoked; stopping sync and keeping everything downstream", "reason", reason)
	l.stop()
	l.notify()
}

// applyBundle keeps what the cluster's delivery bundle holds; a bundle
// that cannot be read back keeps the last one.
func (l *link) applyBundle(o client.Object) {
	items := map[string]delivery.Item{}
	if bundle, ok := o.(*corev1.Secret); ok {
		var err error
		if items, err = delivery.Decode(bundle.Data); err != nil {
			l.log.Info("Delivery bundle unreadable; keeping the last one", "error", err.Error())
			return
		}
	}
	l.update(func(s *linkState) { s.bundle = items })
}

// follow lists and then watches the one object of list's kind named name,
// calling apply with it (nil when it does not exist). When forbiddenIsNone,
// an object the cluster may not read is applied as absent and asked for
// again later, without counting as a failure to reach the management cluster.
func (l *link) follow(ctx context.Context, list client.ObjectList, name string, forbiddenIsNone bool, apply func(client.Object)) {
	sel := fields.OneTermEqualSelector("metadata.name", name)
	rv := ""
	for backoff := time.Duration(0); sleep(ctx, backoff); {
		if rv == "" {
			lctx, cancel := context.WithTimeout(ctx, requestTimeout)
			err := l.client.List(lctx, list, &client.ListOptions{Namespace: l.ns, FieldSelector: sel})
			cancel()
			if forbiddenIsNone && apierrors.IsForbidden(err) {
				apply(nil)
				backoff = maxBackoff
				continue
			}
			if err != nil {
				backoff = l.failed(err, backoff)
				continue
			}
			items, err := apimeta.ExtractList(list)
			if err != nil {
				backoff = l.failed(err, backoff)
				continue
			}
			var obj client.Object
			if len(items) > 0 {
				obj = items[0].(client.Object)
			}
			apply(obj)
			rv = list.GetResourceVersion()
		}
		timeout := int64(watchTimeout / time.Second)
		w, err := l.client.Watch(ctx, list, &client.ListOptions{Namespace: l.ns, FieldSelector: sel,
			Raw: &metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: &timeout, AllowWatchBookmarks: true}})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			backoff = l.failed(err, backoff)
			continue
		}
		l.succeeded()
		backoff = 0
		rv = consume(w, rv, apply)
	}
}

// consume applies a watch's events until it ends and returns the resource
// version to resume from, or "" when the next watch must start from a list.
func consume(w watch.Interface, rv string, apply func(client.Object)) string {
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added, watch.Modified:
			obj := ev.Object.(client.Object)
			apply(obj)
			rv = obj.GetResourceVersion()
		case watch.Deleted:
			apply(nil)
			rv = ev.Object.(client.Object).GetResourceVersion()
		case watch.Bookmark:
			rv = ev.Object.(client.Object).GetResourceVersion()
		case watch.Error:
			if st, ok := ev.Object.(*metav1.Status); ok && st.Code == http.StatusGone {
				return ""
			}
			return rv
		}
	}
	return rv
}

// beat renews the Lease named after the cluster every heartbeat, and
// reports the agent's versions and the cluster's Flux on the Remote once
// connected and again whenever what it reports changed. Flux is read again
// on every heartbeat, so an upgrade in place shows within one without a
// restart; see flux.Inspector for why that is cheaper than a watch.
func (l *link) beat(ctx context.Context) {
	var lease *coordinationv1.Lease
	var reported *fluxReport
	var conditions []metav1.Condition
	var backoff time.Duration
	for wait := time.Duration(0); sleep(ctx, wait); {
		wait = l.heartbeat
		// Flux is read first: the Upstream's condition is about this
		// cluster and stays true while the management cluster is away.
		current := l.checkFlux(ctx)
		var err error
		if lease, err = l.renewLease(ctx, lease); err != nil {
			lease = nil
			if !apierrors.IsConflict(err) {
				backoff = l.failed(err, backoff)
				wait = min(backoff, l.heartbeat)
			}
			continue
		}
		backoff = 0
		l.succeeded()
		if reported == nil || !reported.equal(current) {
			if current.compat.Status != "" {
				status.SetCondition(&conditions, 0, fleeetv1.FluxCompatibleCondition, current.compat.Status, current.compat.Reason, current.compat.Message)
			}
			if l.reportVersions(ctx, current.status, conditions) == nil {
				reported = &current
			}
		}
	}
}

// checkFlux reads the cluster's Flux, records it and says so in the log
// when whether it serves what the agent writes changed.
func (l *link) checkFlux(ctx context.Context) fluxReport {
	var current fluxReport
	if l.inspectFlux == nil {
		return current
	}
	current.status, current.compat = l.inspectFlux(ctx)
	before := l.snapshot().flux
	if before != nil && before.equal(current) {
		return current
	}
	if before == nil || before.compat != current.compat {
		if current.compat.Status == metav1.ConditionTrue {
			l.log.Info("Flux serves every kind the agent writes", "flux", current.status.String())
		} else {
			l.log.Info("Flux does not serve what the agent writes; the plan is still mirrored",
				"reason", current.compat.Reason, "message", current.compat.Message)
		}
	}
	l.update(func(s *linkState) { s.flux = &current })
	return current
}

func (l *link) renewLease(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if lease == nil {
		lease = &coordinationv1.Lease{}
		if err := l.client.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: l.cluster}, lease); err != nil {
			return nil, err
		}
	}
	now := metav1.NewMicroTime(time.Now())
	duration := int32(2 * l.heartbeat / time.Second)
	lease.Spec.RenewTime, lease.Spec.LeaseDurationSeconds = &now, &duration
	if err := l.client.Update(ctx, lease); err != nil {
		return nil, err
	}
	return lease, nil
}

// reportVersions applies the fields of the Remote's status the agent owns:
// its own and Kubernetes' versions, that it reads CompiledSyncs, the
// cluster's Flux, the FluxCompatible condition and the labels it requests
// (the Upstream's spec.labels, which the manager applies as far as the
// registration freed them).
func (l *link) reportVersions(ctx context.Context, fluxStatus fleeetv1.FluxStatus, conditions []metav1.Condition) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: l.cluster}}
	requested := l.labels
	if requested == nil {
		requested = map[string]string{} // sent: none requested removes what was
	}
	// readsCompiledSyncs and readsCompiledPlans tell the manager it may
	// name CompiledSyncs in the plan in place of the syncs they hold, and a
	// CompiledPlan in place of the entries parts share (see
	// Reconciler.reconcilePlan).
	owned := map[string]any{
		"agentVersion": l.versions.Agent, "kubernetesVersion": l.versions.Kubernetes, "flux": fluxStatus,
		"requestedLabels": requested, "readsCompiledSyncs": true, "readsCompiledPlans": true,
	}
	if len(conditions) > 0 {
		// Sent only with a condition to own: the list is shared with
		// the manager's writers.
		owned["conditions"] = conditions
	}
	// An older manager's Remote CRD lacks readsCompiledPlans: said
	// without it, the manager writes plans the way it knows.
	return status.ApplyNewer(ctx, l.client, remote, status.AgentManager, owned, "readsCompiledPlans")
}

// renew replaces the credential at 80% of its lifetime with a new token
// for the cluster's own identity, kept downstream through store. A stored
// token minted to live longer than the link's lifetime (the setting was
// shortened since) is replaced within 80% of the new one.
func (l *link) renew(ctx context.Context, obtained time.Time) {
	for backoff := time.Duration(0); sleep(ctx, max(backoff, time.Until(l.renewAt(obtained)))); {
		mctx, cancel := context.WithTimeout(ctx, requestTimeout)
		token, err := credential.Mint(mctx, l.client, l.ns, fleeetv1.RemoteIdentityName(l.cluster), l.lifetime, nil)
		cancel()
		if err == nil {
			err = l.store(ctx, token)
		}
		if err != nil {
			backoff = l.failed(fmt.Errorf("renewing the cluster's credential: %w", err), backoff)
			continue
		}
		l.token.Store(&token)
		obtained, backoff = time.Now(), 0
		l.log.Info("Renewed the cluster's credential", "expiresAt", token.ExpiresAt)
		l.notify()
	}
}

// renewAt is when the credential obtained at obtained is replaced.
func (l *link) renewAt(obtained time.Time) time.Time {
	at := l.token.Load().RenewAt(obtained)
	if sooner := obtained.Add(l.lifetime * 4 / 5); sooner.Before(at) {
		return sooner
	}
	return at
}

// readPlan returns the cluster's whole plan headed by first, part 0 first,
// getting only the further parts whose listed revision differs from the
// one last read; incomplete says which part keeps it from being whole.
// Only part 0 is watched: the manager writes it last, so a change of any
// part shows as a change of part 0.
func (l *link) readPlan(ctx context.Context, first *fleeetv1.ProxyAssemblage) (plan []*fleeetv1.ProxyAssemblage, incomplete, err error) {
	listed := first.Spec.Assemblage.Parts
	return mirror.Assemble(first, func(k int) (*fleeetv1.ProxyAssemblage, error) {
		l.mu.Lock()
		held := l.parts[k]
		l.mu.Unlock()
		if held != nil && held.Spec.Assemblage.PartRevision == listed[k-1] {
			return held.DeepCopy(), nil
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		pa := &fleeetv1.ProxyAssemblage{}
		err := l.client.Get(rctx, client.ObjectKey{Namespace: l.ns, Name: fleeetv1.PlanPartName(l.cluster, k)}, pa)
		switch {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			l.failed(err, 0)
			return nil, err
		}
		l.mu.Lock()
		l.parts[k] = pa.DeepCopy()
		l.mu.Unlock()
		return pa, nil
	})
}

// linkStore reads the CompiledSyncs and CompiledPlans of the management
// namespace with a GET of its own each: the cluster's identity may get them
// by name but never list or watch them, and l.client, built without a
// cache, starts no informer. One not found or not granted is the plan's
// trouble, not a failure to reach the management cluster.
type linkStore struct{ l *link }

func (s linkStore) CompiledSync(ctx context.Context, name string) (*fleeetv1.CompiledSync, error) {
	return linkGet(ctx, s.l, name, plancontent.From(s.l.client, s.l.ns).CompiledSync)
}

func (s linkStore) CompiledPlan(ctx context.Context, name string) (*fleeetv1.CompiledPlan, error) {
	return linkGet(ctx, s.l, name, plancontent.From(s.l.client, s.l.ns).CompiledPlan)
}

func linkGet[T any](ctx context.Context, l *link, name string, get func(context.Context, string) (*T, error)) (*T, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	o, err := get(ctx, name)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		l.failed(err, 0)
	}
	return o, err
}

// writeStatus copies the downstream status into the ProxyAssemblage, a
// part of the cluster's plan.
func (l *link) writeStatus(ctx context.Context, pa *fleeetv1.ProxyAssemblage) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	_, k := fleeetv1.PlanOfPart(pa.Name)
	from := pa.ResourceVersion
	// An update, not an apply: the agent owns the whole status, and the
	// resourceVersion keeps it from overwriting a plan it has not seen.
	if err := l.client.Status().Update(ctx, pa, client.FieldOwner(status.AgentManager)); err != nil {
		if !apierrors.IsConflict(err) {
			l.failed(err, 0)
		} else if k > 0 {
			l.mu.Lock()
			l.parts[k] = nil // read it again
			l.mu.Unlock()
		}
		return fmt.Errorf("writing ProxyAssemblage %s status: %w", pa.Name, err)
	}
	// Keep what was written unless something newer was read meanwhile.
	l.mu.Lock()
	held := &l.state.pa
	if k > 0 {
		held = &l.parts[k]
	}
	if *held != nil && (*held).ResourceVersion == from {
		*held = pa.DeepCopy()
	}
	l.mu.Unlock()
	return nil
}

// sleep waits for d or until ctx ends, and tells whether to go on.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
