// Package upstream holds the agent's Upstream controller: it registers the
// cluster with a management namespace, keeps the cluster's credential
// fresh, mirrors the cluster's ProxyAssemblage into a local Assemblage (a
// plan split over several, whole, into as many) and reports the
// Assemblages' status back. Nothing it does deletes anything
// downstream: an unreachable management cluster or a revoked credential
// leaves the last plan running.
package upstream

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/delivery"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/mirror"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/recovery"
	"github.com/fleeet-dev/fleeet/internal/status"
)

// partRetry is how soon a plan not read whole is read again.
const partRetry = 5 * time.Second

// refusalRecheck is how often a refused Upstream looks again at the
// Secrets its refusal came from, its credential and registration token:
// the agent reads the Secrets of its own namespace by name and watches
// none, so this stands in for a watch. The management cluster is asked
// again only once the Upstream or one of those Secrets changed.
const refusalRecheck = 30 * time.Second

// Reconciler reconciles Upstreams.
type Reconciler struct {
	// Client reads and writes the downstream cluster.
	Client client.Client
	// APIReader reads the downstream cluster uncached: the Secrets of the
	// Upstreams' namespace, by name (the cache holds none of them).
	APIReader client.Reader
	// Recorder records registration and revocation on Upstreams.
	Recorder events.EventRecorder
	// Heartbeat is how often the agent renews its Lease upstream.
	Heartbeat time.Duration
	// CredentialLifetime is how long each token the agent mints for its
	// cluster's identity lives; 0 is credential.Lifetime.
	CredentialLifetime time.Duration
	// Versions are reported on the cluster's Remote.
	Versions Versions
	// InspectFlux reads the cluster's Flux, reported on the Upstream and its
	// Remote on every heartbeat; nil reports none.
	InspectFlux func(context.Context) (fleeetv1.FluxStatus, flux.Compatibility)
	// Concurrent is how many Upstreams reconcile at once.
	Concurrent int
	// AllowUnconfined lets an Upstream without spec.serviceAccountName register
	// and mirror its plan, leaving the ServiceAccount to the plan (by default
	// none: Flux applies as itself). Off, such an Upstream is Stalled.
	AllowUnconfined bool

	// deliveries writes the Secrets plans deliver, without reading any.
	deliveries delivery.Writer

	mu    sync.Mutex
	links map[client.ObjectKey]*link
	// remotes are the Upstreams whose Remote this agent created and whose
	// first credential it has not collected yet.
	remotes map[client.ObjectKey]pending
	// rejected are the Upstreams whose credential the management cluster
	// rejected and that have not recovered yet: the credential is not
	// tried again meanwhile.
	rejected map[client.ObjectKey]bool
	// refusals are the Upstreams whose registration or credential was
	// refused, with the local state the refusal was given in.
	refusals map[client.ObjectKey]refused
	changes  chan event.TypedGenericEvent[*fleeetv1.Upstream]
}

// refused is a refusal and the state (localState) of the Upstream and its
// Secrets when it was given: until that changes, it stands.
type refused struct {
	state string
	err   refusal
}

// SetupWithManager registers the controller. Besides Upstreams, it is woken
// by its links (plan or connectivity changed) and by the Assemblages it
// mirrors (status to report). It watches no Secret: those of its own
// namespace it reads by name when it needs them (see refusalRecheck).
func (r *Reconciler) SetupWithManager(_ context.Context, mgr ctrl.Manager) error {
	r.links = map[client.ObjectKey]*link{}
	r.remotes = map[client.ObjectKey]pending{}
	r.rejected = map[client.ObjectKey]bool{}
	r.refusals = map[client.ObjectKey]refused{}
	r.changes = make(chan event.TypedGenericEvent[*fleeetv1.Upstream], 128)
	return ctrl.NewControllerManagedBy(mgr).
		Named("upstream").
		For(&fleeetv1.Upstream{}).
		Watches(&fleeetv1.Assemblage{}, handler.EnqueueRequestsFromMapFunc(upstreamOfAssemblage)).
		WatchesRawSource(source.Channel(r.changes, &handler.TypedEnqueueRequestForObject[*fleeetv1.Upstream]{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Concurrent)}).
		Complete(r)
}

// Reconcile registers, connects and mirrors one Upstream. Status is written
// in one deferred patch so every exit records what happened.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	up := &fleeetv1.Upstream{}
	if err := r.Client.Get(ctx, req.NamespacedName, up); err != nil {
		r.disconnect(req.NamespacedName)
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			r.markRejected(req.NamespacedName, false)
			r.markRefused(req.NamespacedName, refused{})
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !up.DeletionTimestamp.IsZero() {
		r.disconnect(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	defer status.NewPatcher(r.Client, r.Recorder, up).Finish(ctx, &retErr)

	if !r.reconcileConfinement(up) {
		return ctrl.Result{}, nil
	}
	l, result, err := r.reconcileConnection(ctx, up)
	if l == nil {
		return result, err
	}
	st := l.snapshot()
	if !r.reconcileLinkState(up, l, st) {
		return ctrl.Result{}, nil
	}
	return r.reconcilePlan(ctx, up, l, st)
}

// reconcileConfinement refuses an Upstream that names no ServiceAccount,
// unless AllowUnconfined: its link is stopped and it is Stalled with
// ReasonServiceAccountNameUnset. It is refused before registering, so the
// registration token is not spent on it. It reports whether the Upstream
// may go on.
func (r *Reconciler) reconcileConfinement(up *fleeetv1.Upstream) bool {
	if up.Spec.ServiceAccountName != "" || r.AllowUnconfined {
		return true
	}
	r.disconnect(client.ObjectKeyFromObject(up))
	status.MarkStalled(up, fleeetv1.ReasonServiceAccountNameUnset,
		"spec.serviceAccountName: empty, so Flux would apply this tenant's syncs with its own, unconfined identity; "+
			"name the tenant's ServiceAccount in its downstream namespace, or start the agent with --allow-unconfined-syncs")
	return false
}

// reconcileConnection returns the Upstream's link, registering or
// recovering first when needed (connectOrRecover). When there is none yet
// it returns a nil link with the result and error to end the reconcile
// with, the Upstream marked not registered (markNotRegistered):
//   - a failed recovery is retried after a while, the Upstream Failed
//     (ReasonRecoveryFailed, ReasonRecoveryRefused);
//   - a first credential not issued yet is polled for, the Upstream Stalled
//     with ReasonRegistrationPending;
//   - a refused registration waits for the Upstream or its token to change,
//     Stalled with ReasonRegistrationRefused, looking again every
//     refusalRecheck;
//   - any other error is returned, the Upstream Failed with
//     ReasonRegistrationFailed.
func (r *Reconciler) reconcileConnection(ctx context.Context, up *fleeetv1.Upstream) (*link, ctrl.Result, error) {
	l, err := r.connectOrRecover(ctx, up)
	if err == nil {
		return l, ctrl.Result{}, nil
	}
	var refused refusal
	var waiting awaiting
	var recovering recoveryError
	switch {
	case errors.As(err, &recovering):
		log.FromContext(ctx).Info("Recovery failed; retrying", "error", err.Error())
		markNotRegistered(up, status.MarkFailed, recovering.reason(), err.Error())
		return nil, ctrl.Result{RequeueAfter: recovering.retry()}, nil
	case errors.As(err, &waiting) && !waiting.overdue():
		markNotRegistered(up, status.MarkStalled, fleeetv1.ReasonRegistrationPending, err.Error())
		return nil, ctrl.Result{RequeueAfter: credentialPoll}, nil
	case errors.As(err, &refused):
		if c := apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.RegisteredCondition); c == nil || c.Message != err.Error() {
			log.FromContext(ctx).Error(err, "Registration refused; fix the Upstream or its token and the agent retries")
		}
		markNotRegistered(up, status.MarkStalled, fleeetv1.ReasonRegistrationRefused, err.Error())
		return nil, ctrl.Result{RequeueAfter: refusalRecheck}, nil
	}
	markNotRegistered(up, status.MarkFailed, fleeetv1.ReasonRegistrationFailed, err.Error())
	return nil, ctrl.Result{}, err
}

// reconcileLinkState reports what the link last saw of the management
// cluster: the cluster's Flux (reconcileFlux), the manager's answer to
// spec.labels (LabelsApplied), when the credential expires, and the
// Registered and Connected conditions. A revoked Remote leaves the Upstream
// Stalled with ReasonRevoked and nothing downstream deleted; it reports
// whether the Upstream may go on to its plan.
func (r *Reconciler) reconcileLinkState(up *fleeetv1.Upstream, l *link, st linkState) bool {
	r.reconcileFlux(up, st.flux)
	if c := st.labels; c != nil {
		status.SetCondition(&up.Status.Conditions, up.Generation, fleeetv1.LabelsAppliedCondition, c.Status, c.Reason,
			"the management cluster says: "+c.Message)
	}
	token := l.token.Load()
	up.Status.CredentialExpiresAt = &metav1.Time{Time: token.ExpiresAt}
	if st.revoked != "" {
		markNotRegistered(up, status.MarkStalled, fleeetv1.ReasonRevoked, st.revoked+"; nothing downstream was deleted")
		return false
	}
	status.SetCondition(&up.Status.Conditions, up.Generation, fleeetv1.RegisteredCondition, metav1.ConditionTrue, fleeetv1.ReasonRegistered,
		fmt.Sprintf("registered as Remote %s/%s", up.Spec.Management.Namespace, up.Spec.ClusterName))
	switch {
	case st.err != nil:
		status.SetCondition(&up.Status.Conditions, up.Generation, fleeetv1.ConnectedCondition, metav1.ConditionFalse, fleeetv1.ReasonUnreachable,
			fmt.Sprintf("cannot reach the management cluster (%v); keeping the last plan and retrying", st.err))
	case st.contact.IsZero():
		status.SetCondition(&up.Status.Conditions, up.Generation, fleeetv1.ConnectedCondition, metav1.ConditionFalse, fleeetv1.ReasonConnecting,
			"connecting to the management cluster")
	default:
		status.SetCondition(&up.Status.Conditions, up.Generation, fleeetv1.ConnectedCondition, metav1.ConditionTrue, fleeetv1.ReasonConnected,
			"the management cluster answers")
	}
	return true
}

// reconcilePlan reads the cluster's whole plan through the link, with the
// CompiledSyncs its entries name (through the link's cache), mirrors it into the local
// Assemblages (mirror) and delivers the Secrets it names (deliver). The
// Upstream is Ready with ReasonSynced once the plan is mirrored and the
// management cluster reachable; else Failed with ReasonAwaitingPlan (no
// ProxyAssemblage yet), ReasonPlanIncomplete (a part or a CompiledSync it
// names not read; read again after partRetry), ReasonMirrorFailed (the
// error is returned) or ReasonUnreachable (the last plan applied, its
// status not reported until the link reconnects).
func (r *Reconciler) reconcilePlan(ctx context.Context, up *fleeetv1.Upstream, l *link, st linkState) (ctrl.Result, error) {
	if st.pa == nil {
		status.MarkFailed(up, fleeetv1.ReasonAwaitingPlan, "waiting for the cluster's ProxyAssemblage")
		return ctrl.Result{}, nil
	}
	plan, incomplete, err := l.readPlan(ctx, st.pa.DeepCopy())
	if err == nil && incomplete != nil {
		err = incomplete
	}
	var whole []*fleeetv1.ProxyAssemblage
	if err == nil {
		whole, err = plancontent.ResolvePlan(ctx, plan, &l.content)
	}
	if err != nil {
		// Nothing is mirrored from a plan not read whole: the
		// Assemblages keep the last one.
		msg := fmt.Sprintf("the plan is not read whole (%v); the local Assemblages keep the last plan mirrored", err)
		if c := apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.ReadyCondition); c == nil || c.Message != msg {
			log.FromContext(ctx).Info("Plan not read whole; keeping the last plan mirrored", "error", err.Error())
		}
		status.MarkFailed(up, fleeetv1.ReasonPlanIncomplete, msg)
		return ctrl.Result{RequeueAfter: partRetry}, nil
	}
	// While the management cluster cannot be reached, the plan is still
	// mirrored but the status waits: reconnecting wakes this up again.
	asm, err := r.mirror(ctx, up, l, plan, whole, st.err == nil)
	if err != nil {
		status.MarkFailed(up, fleeetv1.ReasonMirrorFailed, err.Error())
		return ctrl.Result{}, err
	}
	if err := r.deliver(ctx, up, asm, mirror.Syncs(whole), st); err != nil {
		status.MarkFailed(up, fleeetv1.ReasonMirrorFailed, err.Error())
		return ctrl.Result{}, err
	}
	if st.err != nil {
		status.MarkFailed(up, fleeetv1.ReasonUnreachable, "the last plan received is applied; the management cluster cannot be reached")
		return ctrl.Result{}, nil
	}
	status.MarkReady(up, fleeetv1.ReasonSynced, "the cluster's plan is mirrored into the local Assemblage")
	if len(delivery.Names(mirror.Syncs(whole))) > 0 {
		// Delivered Secrets changed or deleted downstream are put back.
		return ctrl.Result{RequeueAfter: delivery.RewriteAfter}, nil
	}
	return ctrl.Result{}, nil
}

// reconcileFlux sets the FluxCompatible condition from what the link last
// read of the cluster's Flux, with a Warning event when Flux stops serving
// what the agent writes (or serves it differently wrong) and a Normal one
// when it serves it again. The plan is mirrored either way: nothing is
// deleted, and Flux objects of a version not served fail on their own.
func (r *Reconciler) reconcileFlux(up *fleeetv1.Upstream, report *fluxReport) {
	if report == nil || report.compat.Status == "" {
		return
	}
	up.Status.Flux = report.status.DeepCopy()
	c := report.compat
	var before *metav1.Condition
	if c := apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.FluxCompatibleCondition); c != nil {
		before = c.DeepCopy() // status.SetCondition changes it in place
	}
	status.SetCondition(&up.Status.Conditions, up.Generation, fleeetv1.FluxCompatibleCondition, c.Status, c.Reason, c.Message)
	switch {
	case c.Status == metav1.ConditionFalse && (before == nil || before.Status != c.Status || before.Message != c.Message):
		r.Recorder.Eventf(up, nil, corev1.EventTypeWarning, c.Reason, "CheckFlux", "%s", c.Message)
	case c.Status == metav1.ConditionTrue && before != nil && before.Status == metav1.ConditionFalse:
		r.Recorder.Eventf(up, nil, corev1.EventTypeNormal, c.Reason, "CheckFlux", "%s", c.Message)
	}
}

// connect returns the Upstream's running link, starting one from the stored
// credential, or registering first when the cluster has none.
func (r *Reconciler) connect(ctx context.Context, up *fleeetv1.Upstream) (*link, error) {
	key := client.ObjectKeyFromObject(up)
	r.mu.Lock()
	l, ok := r.links[key]
	r.mu.Unlock()
	if ok && l.generation == up.Generation {
		return l, nil
	}
	r.disconnect(key)
	token, err := r.credentialOnce(ctx, up)
	if err != nil {
		return nil, err
	}
	l = &link{
		ns: up.Spec.Management.Namespace, cluster: up.Spec.ClusterName, generation: up.Generation, labels: up.Spec.Labels,
		heartbeat: r.Heartbeat, lifetime: r.lifetime(), versions: r.Versions, inspectFlux: r.InspectFlux,
		log:   log.FromContext(ctx).WithValues("management", up.Spec.Management.URL, "remote", up.Spec.Management.Namespace+"/"+up.Spec.ClusterName),
		store: func(ctx context.Context, t credential.Token) error { return r.storeCredential(ctx, up, t, nil) },
		notify: func() {
			r.changes <- event.TypedGenericEvent[*fleeetv1.Upstream]{Object: &fleeetv1.Upstream{
				ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
		},
	}
	l.token.Store(&token)
	l.content.From = linkStore{l: l}
	if l.client, err = client.NewWithWatch(managementConfig(up, func() string { return l.token.Load().Value }),
		client.Options{Scheme: r.Client.Scheme()}); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.links[key] = l
	r.mu.Unlock()
	l.start(time.Now())
	return l, nil
}

// connectOrRecover connects the Upstream; when the management cluster
// rejects the cluster's credential and offers recovery, it recovers first,
// and does not try the rejected credential again until recovered.
func (r *Reconciler) connectOrRecover(ctx context.Context, up *fleeetv1.Upstream) (*link, error) {
	key := client.ObjectKeyFromObject(up)
	if up.Spec.Management.RecoveryURL == "" {
		return r.connect(ctx, up)
	}
	r.mu.Lock()
	rejected := r.rejected[key]
	r.mu.Unlock()
	if !rejected {
		l, err := r.connect(ctx, up)
		if err != nil || !l.snapshot().unauthorized {
			return l, err
		}
		r.disconnect(key)
		r.markRejected(key, true)
	}
	if _, err := r.recover(ctx, up); err != nil {
		return nil, err
	}
	r.markRejected(key, false)
	return r.connect(ctx, up)
}

// lifetime is how long each token the agent mints lives.
func (r *Reconciler) lifetime() time.Duration {
	if r.CredentialLifetime == 0 {
		return credential.Lifetime
	}
	return r.CredentialLifetime
}

// markRejected records whether the Upstream's credential was rejected.
func (r *Reconciler) markRejected(key client.ObjectKey, rejected bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rejected {
		r.rejected[key] = true
		return
	}
	delete(r.rejected, key)
}

// pending is a Remote this agent created: when, and the recovery key it
// named.
type pending struct {
	at  time.Time
	key ed25519.PrivateKey
}

// created returns the Remote this agent created for the Upstream, if it
// awaits that Remote's first credential.
func (r *Reconciler) created(key client.ObjectKey) (pending, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.remotes[key]
	return p, ok
}

// markCreated records that this agent created the Upstream's Remote.
func (r *Reconciler) markCreated(key client.ObjectKey, p pending) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.remotes[key] = p
}

// forget forgets the Remote this agent created for the Upstream.
func (r *Reconciler) forget(key client.ObjectKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.remotes, key)
}

// credentialOnce is credential, except for an Upstream refused before that
// has not changed since, nor have its credential and token Secrets: it gets
// the same refusal again, and the management cluster is not asked.
func (r *Reconciler) credentialOnce(ctx context.Context, up *fleeetv1.Upstream) (credential.Token, error) {
	key := client.ObjectKeyFromObject(up)
	state, err := r.localState(ctx, up)
	if err != nil {
		return credential.Token{}, err
	}
	r.mu.Lock()
	last, ok := r.refusals[key]
	r.mu.Unlock()
	if ok && last.state == state {
		return credential.Token{}, last.err
	}
	token, err := r.credential(ctx, up)
	var refusedNow refusal
	switch {
	case errors.As(err, &refusedNow) && refusedNow.askAgain:
		r.markRefused(key, refused{})
	case errors.As(err, &refusedNow):
		r.markRefused(key, refused{state: state, err: refusedNow})
	case err == nil:
		r.markRefused(key, refused{})
	}
	return token, err
}

// localState is what a refusal of the Upstream depends on downstream: its
// generation and the resourceVersions of its credential and registration
// token Secrets, read by their metadata.
func (r *Reconciler) localState(ctx context.Context, up *fleeetv1.Upstream) (string, error) {
	names := []string{credentialSecretName(up)}
	if ref := up.Spec.TokenSecretRef; ref != nil {
		names = append(names, ref.Name)
	}
	state := fmt.Sprint(up.Generation)
	for _, name := range names {
		secret := &metav1.PartialObjectMetadata{}
		secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: up.Namespace, Name: name}, secret)
		if client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("reading Secret %s: %w", name, err)
		}
		state += "/" + secret.ResourceVersion
	}
	return state, nil
}

// markRefused records the Upstream's last refusal; the zero refused
// forgets it.
func (r *Reconciler) markRefused(key client.ObjectKey, last refused) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if last.state == "" {
		delete(r.refusals, key)
		return
	}
	r.refusals[key] = last
}

// disconnect stops the Upstream's link, if any.
func (r *Reconciler) disconnect(key client.ObjectKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.links[key]; ok {
		l.stop()
		delete(r.links, key)
	}
}

// credential returns the cluster's stored credential, registering the
// cluster if it holds none, recovering it when it expired and the
// management cluster offers recovery; the registration token is forgotten
// once the cluster's own credential is stored. The credential Secret is
// read by name, uncached.
func (r *Reconciler) credential(ctx context.Context, up *fleeetv1.Upstream) (credential.Token, error) {
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: up.Namespace, Name: credentialSecretName(up)}, secret)
	switch {
	case err == nil:
		up.Status.CredentialSecretName = secret.Name
		token, err := credential.TokenFromSecret(secret)
		if err != nil {
			return credential.Token{}, refusal{msg: err.Error()}
		}
		if !token.ExpiresAt.IsZero() && time.Now().After(token.ExpiresAt) {
			if up.Spec.Management.RecoveryURL != "" {
				return r.recover(ctx, up)
			}
			return credential.Token{}, refusal{msg: fmt.Sprintf("the cluster's credential expired at %s while the management cluster could not be reached; delete Secret %s and register again with a new RegistrationToken",
				token.ExpiresAt.UTC().Format(time.RFC3339), secret.Name)}
		}
		return token, nil
	case !apierrors.IsNotFound(err):
		return credential.Token{}, err
	}
	token, key, err := r.register(ctx, up)
	if err != nil {
		return credential.Token{}, err
	}
	if err := r.storeCredential(ctx, up, token, key); err != nil {
		return credential.Token{}, err
	}
	r.forget(client.ObjectKeyFromObject(up))
	r.Recorder.Eventf(up, nil, corev1.EventTypeNormal, fleeetv1.ReasonRegistered, "Register",
		"Registered as Remote %s/%s; the credential is in Secret %s", up.Spec.Management.Namespace, up.Spec.ClusterName, credentialSecretName(up))
	if ref := up.Spec.TokenSecretRef; ref != nil {
		tokenSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: up.Namespace, Name: ref.Name}}
		if err := client.IgnoreNotFound(r.Client.Delete(ctx, tokenSecret)); err != nil {
			return credential.Token{}, fmt.Errorf("forgetting the registration token: %w", err)
		}
	}
	return token, nil
}

// storeCredential keeps the cluster's credential in a Secret owned by the
// Upstream, with the recovery key when one is given, else the one it holds.
// The Secret is read by name, uncached, and written with the
// resourceVersion read, so a recovery key put there meanwhile (fleetctl
// reenrol) is not lost: the write fails and is retried.
func (r *Reconciler) storeCredential(ctx context.Context, up *fleeetv1.Upstream, token credential.Token, key ed25519.PrivateKey) error {
	name := credentialSecretName(up)
	secret := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: up.Namespace, Name: name}, secret); {
	case apierrors.IsNotFound(err):
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: up.Namespace, Name: name}}
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", name, err)
	}
	kept := secret.Data[recovery.PrivateKeyKey]
	secret.Data = token.SecretData()
	switch {
	case key != nil:
		secret.Data[recovery.PrivateKeyKey] = recovery.EncodePrivate(key)
	case kept != nil:
		secret.Data[recovery.PrivateKeyKey] = kept
	}
	if err := controllerutil.SetControllerReference(up, secret, r.Client.Scheme()); err != nil {
		return err
	}
	var err error
	if secret.ResourceVersion == "" {
		err = r.Client.Create(ctx, secret)
	} else {
		err = r.Client.Update(ctx, secret)
	}
	if err != nil {
		return fmt.Errorf("storing the cluster's credential in Secret %s: %w", name, err)
	}
	up.Status.CredentialSecretName = name
	return nil
}

// mirror writes whole, the plan as read with its entries resolved, into the
// local Assemblages, part k into Assemblage PlanPartName(up.Name, k), and,
// when report is set, each Assemblage's status, once it describes its
// part, back into that part of plan, as read. The link's cache then keeps
// only the CompiledSyncs plan names. It returns part 0's Assemblage.
func (r *Reconciler) mirror(ctx context.Context, up *fleeetv1.Upstream, l *link, plan, whole []*fleeetv1.ProxyAssemblage, report bool) (*fleeetv1.Assemblage, error) {
	asms, changed, err := mirror.Downstream{
		Client: r.Client, Key: client.ObjectKey{Namespace: assemblageNamespace(up), Name: up.Name},
		ServiceAccount: up.Spec.ServiceAccountName,
		Annotations:    map[string]string{fleeetv1.UpstreamAnnotation: client.ObjectKeyFromObject(up).String()},
	}.Write(ctx, whole)
	if err != nil {
		return nil, err
	}
	l.content.Keep(plan)
	if changed {
		up.Status.LastSyncTime = &metav1.Time{Time: time.Now()}
	}
	if !report {
		return asms[0], nil
	}
	var errs []error
	for k, pa := range plan {
		st, ok := mirror.Status(pa, asms[k])
		if !ok || equality.Semantic.DeepEqual(st, pa.Status) {
			continue
		}
		pa.Status = st
		errs = append(errs, l.writeStatus(ctx, pa))
	}
	return asms[0], errors.Join(errs...)
}

// deliver writes into the Assemblage's namespace every Secret of the
// cluster's bundle that syncs, the whole plan's, name, and sets the Delivered condition
// while the plan names any.
// It only writes: a delivered Secret is deleted by the Assemblage
// controller once no sync there, present or being removed, names it. A
// Secret the plan names that the bundle does not hold yet is not an error;
// the syncs naming it wait downstream, Blocked, until it arrives. A Secret
// of the same name the fleet did not deliver is left alone and reported,
// with a Warning event when the conflicts change.
func (r *Reconciler) deliver(ctx context.Context, up *fleeetv1.Upstream, asm *fleeetv1.Assemblage, syncs []fleeetv1.NamedSync, st linkState) error {
	names := delivery.Names(syncs)
	if len(names) == 0 {
		apimeta.RemoveStatusCondition(&up.Status.Conditions, fleeetv1.DeliveredCondition)
		return nil
	}
	if st.bundle == nil {
		return nil // not read yet
	}
	items := map[string]delivery.Item{}
	for _, name := range names {
		if item, ok := st.bundle[name]; ok {
			items[name] = item
		}
	}
	conflicts, err := r.deliveries.Write(ctx, r.Client, asm, items)
	if err != nil {
		return err
	}
	before := apimeta.FindStatusCondition(up.Status.Conditions, fleeetv1.DeliveredCondition)
	if len(conflicts) == 0 {
		status.SetCondition(&up.Status.Conditions, up.Generation, fleeetv1.DeliveredCondition, metav1.ConditionTrue, fleeetv1.ReasonDelivered,
			fmt.Sprintf("%d of the %d Secrets the plan delivers are written in namespace %s", len(items), len(names), asm.Namespace))
		return nil
	}
	msg := fmt.Sprintf("Secrets %s exist in namespace %s and were not delivered by the fleet; they are left as they are and the syncs naming them wait",
		strings.Join(conflicts, ", "), asm.Namespace)
	if before == nil || before.Message != msg {
		r.Recorder.Eventf(up, nil, corev1.EventTypeWarning, fleeetv1.ReasonDeliveryConflict, "Deliver", "%s", msg)
	}
	status.SetCondition(&up.Status.Conditions, up.Generation, fleeetv1.DeliveredCondition, metav1.ConditionFalse, fleeetv1.ReasonDeliveryConflict, msg)
	return nil
}

// upstreamOfAssemblage maps an Assemblage to the Upstream it mirrors.
func upstreamOfAssemblage(_ context.Context, o client.Object) []reconcile.Request {
	ns, name, ok := strings.Cut(o.GetAnnotations()[fleeetv1.UpstreamAnnotation], "/")
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}}
}

func credentialSecretName(up *fleeetv1.Upstream) string { return up.Name + "-credential" }

func assemblageNamespace(up *fleeetv1.Upstream) string {
	if up.Spec.AssemblageNamespace != "" {
		return up.Spec.AssemblageNamespace
	}
	return up.Namespace
}

// markNotRegistered says the Upstream is neither registered nor connected:
// Registered and Connected False for reason, and the Upstream marked by
// mark, status.MarkStalled when only a changed Upstream or token helps,
// status.MarkFailed when retrying may.
func markNotRegistered(up *fleeetv1.Upstream, mark func(status.Conditioned, string, string), reason, msg string) {
	status.SetCondition(&up.Status.Conditions, up.Generation, fleeetv1.RegisteredCondition, metav1.ConditionFalse, reason, msg)
	status.SetCondition(&up.Status.Conditions, up.Generation, fleeetv1.ConnectedCondition, metav1.ConditionFalse, reason, msg)
	mark(up, reason, msg)
}
