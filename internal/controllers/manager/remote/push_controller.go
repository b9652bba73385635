// Package remote holds the manager's per-Remote controllers that act on
// the plan the compiler (package compiler) writes: the push controller that
// delivers it to push-mode clusters, the delivery controller that bundles
// the Secrets it delivers for a pull Remote, and the health controller that
// tells whether a pull Remote's agent is alive.
package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
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
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/delivery"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/kubeconfig"
	"github.com/fleeet-dev/fleeet/internal/mirror"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/shard"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/watches"
)

// kubeconfigSecretIndex indexes Remotes by the Secret holding their kubeconfig.
const kubeconfigSecretIndex = "spec.kubeconfigRef.name"

// PushReconciler delivers the ProxyAssemblage of every push-mode Remote: it writes the
// Assemblage into the Remote's cluster through the kubeconfig in the
// Remote's Secret and copies the Assemblage's status back. Plan entries
// naming a CompiledSync are pushed as the sync it holds. A cluster that
// cannot be reached is marked Connected=False and retried with backoff; the
// other Remotes are unaffected. A Remote the manager refuses to push to (no
// spec.serviceAccountName, a kubeconfig that is invalid or uses a refused
// field) is marked Connected=False and Stalled=True until it changes.
type PushReconciler struct {
	// Shard says which Remotes this replica reconciles; nil for all of
	// them, on the leader alone.
	Shard *shard.Members
	// Concurrent is how many objects reconcile at once.
	Concurrent int
	// Client reads the management cluster from the cache and writes status.
	Client client.Client
	// live reads kubeconfig Secrets, which the manager's cache holds by
	// their metadata alone (package secrets): the manager's API reader.
	live client.Reader
	// Recorder records refusals and failures as events on the Remote.
	Recorder events.EventRecorder
	// Timeout bounds each request to a downstream cluster.
	Timeout time.Duration
	// Poll is how often the status of a cluster still progressing is read;
	// Ready clusters are read four times less often.
	Poll time.Duration
	// Kubeconfig says which kubeconfig fields beyond inline credentials an
	// operator accepts.
	Kubeconfig kubeconfig.Options

	// deliveries writes the Secrets plans deliver downstream, without
	// reading any there.
	deliveries delivery.Writer

	mu      sync.Mutex
	clients map[client.ObjectKey]pushClient
}

// pushClient is a downstream client built from one version of a kubeconfig
// Secret, and what reads the cluster's Flux through it. The Secret is read
// from the apiserver only when the version its cached metadata shows is
// not the one the client was built from.
type pushClient struct {
	ref           fleeetv1.SecretKeyReference
	secretVersion string
	client        client.Client
	flux          *flux.Inspector
}

// SetupWithManager registers the controller: ProxyAssemblage spec changes,
// Remote changes and kubeconfig Secret changes all lead to the Remote's push.
// A kubeconfig Secret is the tenant's and unlabelled, so its changes are
// heard through the metadata watch of every Secret (package secrets),
// which holds no Secret's data: that is what lets a Remote refused for its
// kubeconfig, which is never requeued, recover once the Secret is fixed,
// and what picks up a rotation before the next poll. The Secrets the plan
// delivers are labelled deliverable and watched whole.
func (p *PushReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	p.live = mgr.GetAPIReader()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &fleeetv1.Remote{}, kubeconfigSecretIndex, func(o client.Object) []string {
		if ref := o.(*fleeetv1.Remote).Spec.KubeconfigRef; ref != nil {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	return p.Shard.Complete(ctrl.NewControllerManagedBy(mgr).
		Named("push").
		For(&fleeetv1.Remote{}).
		Watches(&fleeetv1.ProxyAssemblage{}, planOfPart).
		Watches(&corev1.Secret{}, watches.Referrers(p.Client, func() client.ObjectList { return &fleeetv1.RemoteList{} }, kubeconfigSecretIndex),
			builder.OnlyMetadata).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(p.pushRemotesDelivering), builder.WithPredicates(offeredForDelivery)),
		p.Concurrent, p)
}

// Reconcile pushes one Remote's plan and reads back its status.
func (p *PushReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	remote := &fleeetv1.Remote{}
	if err := p.Client.Get(ctx, req.NamespacedName, remote); err != nil || remote.Spec.KubeconfigRef == nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer func() { status.RecordFailure(p.Recorder, remote, retErr) }()
	pa := &fleeetv1.ProxyAssemblage{}
	if err := p.Client.Get(ctx, req.NamespacedName, pa); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if remote.Spec.ServiceAccountName == "" {
		// Only a change of the Remote fixes this; its watch brings us back.
		return ctrl.Result{}, p.setRefused(ctx, remote, fleeetv1.ReasonServiceAccountNameUnset,
			"spec.serviceAccountName: required in push mode: it names the downstream ServiceAccount Flux impersonates to apply the plan")
	}
	downstream, err := p.clientFor(ctx, remote)
	if err != nil {
		// Only a change of the Secret fixes this; its watch brings us back.
		reason := fleeetv1.ReasonKubeconfigInvalid
		if _, ok := errors.AsType[*kubeconfig.RefusedError](err); ok {
			reason = fleeetv1.ReasonKubeconfigRefused
		}
		return ctrl.Result{}, p.setRefused(ctx, remote, reason, err.Error())
	}
	plan, incomplete, err := p.readPlan(ctx, pa)
	if err != nil {
		return ctrl.Result{}, err
	}
	var whole []*fleeetv1.ProxyAssemblage
	if incomplete == nil {
		// A CompiledSync the plan names is written before the plan; one
		// the cache has not seen yet is read on the next poll.
		whole, incomplete = plancontent.ResolvePlan(ctx, plan, plancontent.From(p.Client, pa.Namespace))
	}
	if incomplete != nil {
		// Nothing is pushed from a plan not read whole; the cluster keeps
		// the last one. Each part's event brings its Remote back, and so
		// does the poll.
		before := remote.Status.DeepCopy()
		status.SetCondition(&remote.Status.Conditions, remote.Generation, fleeetv1.ReadyCondition, metav1.ConditionFalse,
			fleeetv1.ReasonPlanIncomplete, fmt.Sprintf("the plan is not whole (%v); the cluster keeps the last plan pushed", incomplete))
		return ctrl.Result{RequeueAfter: p.Poll}, p.applyStatus(ctx, remote, before)
	}
	asms, err := p.push(ctx, downstream.client, remote, whole)
	if err == nil {
		err = p.deliver(ctx, downstream.client, remote, mirror.Syncs(whole), asms[0])
	}
	if err != nil {
		msg := fmt.Sprintf("cannot reach the cluster: %v", err)
		if serr := p.setConnected(ctx, remote, metav1.ConditionFalse, fleeetv1.ReasonUnreachable, msg); serr != nil {
			return ctrl.Result{}, serr
		}
		return ctrl.Result{}, err // back off
	}
	if err := p.copyStatus(ctx, plan, asms); err != nil {
		return ctrl.Result{}, err
	}
	before := remote.Status.DeepCopy()
	p.reconcileFlux(ctx, downstream.flux, remote)
	markConnected(remote, metav1.ConditionTrue, fleeetv1.ReasonPushed, "plan delivered to the cluster")
	if err := p.applyStatus(ctx, remote, before); err != nil {
		return ctrl.Result{}, err
	}
	// The downstream cluster is not watched from here, so its progress is read on an interval.
	if apimeta.IsStatusConditionTrue(asms[0].Status.Conditions, fleeetv1.ReadyCondition) {
		return ctrl.Result{RequeueAfter: 4 * p.Poll}, nil
	}
	return ctrl.Result{RequeueAfter: p.Poll}, nil
}

// readPlan reads, from the cache, the further parts of the plan pa heads
// (see mirror.Assemble). Its entries may name CompiledSyncs, which Reconcile
// resolves, from the cache too, before pushing (plancontent.ResolvePlan).
func (p *PushReconciler) readPlan(ctx context.Context, pa *fleeetv1.ProxyAssemblage) (plan []*fleeetv1.ProxyAssemblage, incomplete, err error) {
	return mirror.Assemble(pa, func(k int) (*fleeetv1.ProxyAssemblage, error) {
		part := &fleeetv1.ProxyAssemblage{}
		err := p.Client.Get(ctx, client.ObjectKey{Namespace: pa.Namespace, Name: fleeetv1.PlanPartName(pa.Name, k)}, part)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return part, err
	})
}

// push writes the whole plan into the Assemblages, part 0 named after the
// tenant namespace, in the namespace of the same name downstream
// (mirror.Downstream). Flux applies it as the Remote's
// spec.serviceAccountName, whatever the plan says. The namespace is created
// only when an Assemblage cannot be created for want of it, so an identity
// confined to Assemblages in namespaces that exist (the agent chart's push
// mode) needs no right to namespaces at all. Errors describe the cluster's
// answers without their bodies.
func (p *PushReconciler) push(ctx context.Context, downstream client.Client, remote *fleeetv1.Remote, plan []*fleeetv1.ProxyAssemblage) ([]*fleeetv1.Assemblage, error) {
	ns := plan[0].Namespace
	asms, _, err := mirror.Downstream{
		Client: downstream, Key: client.ObjectKey{Namespace: ns, Name: ns}, ServiceAccount: remote.Spec.ServiceAccountName,
		Create: func(ctx context.Context, asm *fleeetv1.Assemblage) error {
			return createAssemblage(ctx, downstream, asm)
		},
	}.Write(ctx, plan)
	if _, ok := errors.AsType[*targetError](err); err != nil && !ok {
		err = &targetError{op: "writing the plan into namespace " + ns, err: err}
	}
	return asms, err
}

// deliver writes into asm's namespace downstream the Secrets syncs, the
// whole plan's, deliver, under the rules the agent follows for a pull cluster
// (delivery.Write): Secrets the fleet did not deliver are left alone and
// reported on the Remote, and the cluster's Assemblage controller deletes
// the deliveries no sync uses any more. They are written after the
// Assemblage; its syncs wait, Blocked, until they are there.
func (p *PushReconciler) deliver(ctx context.Context, downstream client.Client, remote *fleeetv1.Remote, syncs []fleeetv1.NamedSync, asm *fleeetv1.Assemblage) error {
	items, err := collectDeliveries(ctx, p.Client, p.Recorder, remote, syncs)
	if err != nil || len(items) == 0 {
		return err
	}
	conflicts, err := p.deliveries.Write(ctx, downstream, asm, items)
	if err != nil {
		return &targetError{op: "delivering Secrets into namespace " + asm.Namespace, err: err}
	}
	if len(conflicts) > 0 {
		p.Recorder.Eventf(remote, nil, corev1.EventTypeWarning, fleeetv1.ReasonDeliveryConflict, "Deliver",
			"Secrets %s exist in namespace %s downstream and were not delivered by the fleet; they are left as they are and the syncs naming them wait",
			strings.Join(conflicts, ", "), asm.Namespace)
	}
	return nil
}

// offeredForDelivery passes the Secrets that are, or were until this
// change, labelled deliverable: only those can change a push delivery.
var offeredForDelivery = predicate.NewPredicateFuncs(func(o client.Object) bool {
	_, ok := o.GetLabels()[fleeetv1.DeliverableLabel]
	return ok
})

// pushRemotesDelivering maps a Secret to the push Remotes whose plans
// deliver it.
func (p *PushReconciler) pushRemotesDelivering(ctx context.Context, o client.Object) []reconcile.Request {
	remotes := &fleeetv1.RemoteList{}
	if err := p.Client.List(ctx, remotes, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range remotes.Items {
		if remotes.Items[i].Spec.KubeconfigRef == nil {
			continue
		}
		pa := &fleeetv1.ProxyAssemblage{}
		key := client.ObjectKeyFromObject(&remotes.Items[i])
		if p.Client.Get(ctx, key, pa) != nil {
			continue
		}
		if plan, incomplete, err := p.readPlan(ctx, pa); err == nil && incomplete == nil &&
			slices.Contains(delivery.Names(mirror.Syncs(plan)), o.GetName()) {
			reqs = append(reqs, reconcile.Request{NamespacedName: key})
		}
	}
	return reqs
}

// createAssemblage creates asm downstream, and its namespace first if the
// cluster says that is what is missing.
func createAssemblage(ctx context.Context, downstream client.Client, asm *fleeetv1.Assemblage) error {
	err := downstream.Create(ctx, asm)
	if apierrors.IsNotFound(err) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: asm.Namespace}}
		if err := downstream.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return &targetError{op: "creating namespace " + asm.Namespace, err: err}
		}
		err = downstream.Create(ctx, asm)
	}
	if err != nil {
		return &targetError{op: "creating Assemblage " + client.ObjectKeyFromObject(asm).String(), err: err}
	}
	return nil
}

// reconcileFlux reads the cluster's Flux through the kubeconfig, as a pull
// cluster's agent does on each heartbeat, into the Remote's status.flux and
// FluxCompatible condition (written with Connected), with a Warning event
// when it does not serve what the cluster's Assemblage will be expanded
// into. The push identity needs `get` on the CRDs flux.CRDNames lists; what
// the cluster answers is never quoted.
func (p *PushReconciler) reconcileFlux(ctx context.Context, inspector *flux.Inspector, remote *fleeetv1.Remote) {
	st, c := inspector.Inspect(ctx)
	remote.Status.Flux = &st
	before := apimeta.FindStatusCondition(remote.Status.Conditions, fleeetv1.FluxCompatibleCondition)
	if c.Status == metav1.ConditionFalse && (before == nil || before.Status != c.Status || before.Message != c.Message) {
		p.Recorder.Eventf(remote, nil, corev1.EventTypeWarning, c.Reason, "CheckFlux", "%s", c.Message)
	}
	status.SetCondition(&remote.Status.Conditions, remote.Generation, fleeetv1.FluxCompatibleCondition, c.Status, c.Reason, c.Message)
}

// targetError is a failed request to a push Remote's cluster. Its text
// leaves out what the cluster answered: the server is the tenant's choice,
// possibly a service inside the manager's network, and an answer copied into
// the Remote's status would let the tenant read it.
type targetError struct {
	op  string
	err error
}

func (e *targetError) Error() string { return e.op + ": " + describe(e.err) }

func (e *targetError) Unwrap() error { return e.err }

// describe says what went wrong with a request to a push target in words of
// the manager's own: a status code, a kind the cluster does not serve, a
// transport failure; never the response body.
func describe(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code != 0 {
		code := int(st.Status().Code)
		return fmt.Sprintf("the cluster answered HTTP %d %s", code, http.StatusText(code))
	}
	if nm, ok := errors.AsType[*apimeta.NoKindMatchError](err); ok {
		// Built from the request, not from the answer.
		return nm.Error()
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		// A transport failure: connection, TLS or timeout; no answer was read.
		return ue.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time"
	}
	return "the cluster's answer is not a Kubernetes API response"
}

// copyStatus copies each Assemblage's status into the ProxyAssemblage part
// it mirrors, once the agent has observed the spec pushed from the part's
// current generation.
func (p *PushReconciler) copyStatus(ctx context.Context, plan []*fleeetv1.ProxyAssemblage, asms []*fleeetv1.Assemblage) error {
	var errs []error
	for k, pa := range plan {
		st, ok := mirror.Status(pa, asms[k])
		if !ok || equality.Semantic.DeepEqual(pa.Status, st) {
			continue
		}
		errs = append(errs, status.Apply(ctx, p.Client, pa, status.PushManager, st))
	}
	return errors.Join(errs...)
}

// clientFor returns a client for the Remote's cluster, rebuilt whenever its
// kubeconfig Secret changes. The Secret is read from the apiserver only
// then: the cache holds its metadata alone. Errors never quote the
// Secret's content.
func (p *PushReconciler) clientFor(ctx context.Context, remote *fleeetv1.Remote) (pushClient, error) {
	ref := remote.Spec.KubeconfigRef
	secretKey := client.ObjectKey{Namespace: remote.Namespace, Name: ref.Name}
	version, err := secrets.Version(ctx, p.Client, secretKey)
	if err != nil {
		return pushClient{}, fmt.Errorf("spec.kubeconfigRef: reading Secret %s: %w", ref.Name, err)
	}
	key := client.ObjectKeyFromObject(remote)
	p.mu.Lock()
	c, ok := p.clients[key]
	p.mu.Unlock()
	if ok && c.ref == *ref && c.secretVersion == version {
		return c, nil
	}
	secret := &corev1.Secret{}
	if err := secrets.Get(ctx, p.Client, p.live, secretKey, secret); err != nil {
		return pushClient{}, fmt.Errorf("spec.kubeconfigRef: reading Secret %s: %w", ref.Name, err)
	}
	data, ok := secret.Data[ref.Key]
	if !ok {
		return pushClient{}, fmt.Errorf("spec.kubeconfigRef: Secret %s has no key %q", ref.Name, ref.Key)
	}
	cfg, err := kubeconfig.Load(data, p.Kubeconfig)
	if err != nil {
		return pushClient{}, fmt.Errorf("spec.kubeconfigRef: Secret %s key %q: %w", ref.Name, ref.Key, err)
	}
	cfg.Timeout = p.Timeout
	downstream, err := client.New(cfg, client.Options{Scheme: p.Client.Scheme()})
	if err != nil {
		return pushClient{}, fmt.Errorf("spec.kubeconfigRef: Secret %s: %w", ref.Name, err)
	}
	pc := pushClient{ref: *ref, secretVersion: secret.ResourceVersion, client: downstream, flux: &flux.Inspector{Reader: downstream, Describe: describe}}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clients == nil {
		p.clients = map[client.ObjectKey]pushClient{}
	}
	p.clients[key] = pc
	return pc, nil
}

// setRefused records that the manager will not push to the Remote until its
// spec or kubeconfig Secret changes: Connected=False and Stalled=True.
func (p *PushReconciler) setRefused(ctx context.Context, remote *fleeetv1.Remote, reason, msg string) error {
	p.Recorder.Eventf(remote, nil, corev1.EventTypeWarning, reason, "Push", "%s", msg)
	before := remote.Status.DeepCopy()
	remote.Status.Mode = fleeetv1.PushMode
	setConnected(remote, metav1.ConditionFalse, reason, msg)
	status.SetCondition(&remote.Status.Conditions, remote.Generation, fleeetv1.StalledCondition, metav1.ConditionTrue, reason, msg)
	return p.applyStatus(ctx, remote, before)
}

// setConnected records whether the Remote's cluster could be reached.
func (p *PushReconciler) setConnected(ctx context.Context, remote *fleeetv1.Remote, cs metav1.ConditionStatus, reason, msg string) error {
	before := remote.Status.DeepCopy()
	markConnected(remote, cs, reason, msg)
	return p.applyStatus(ctx, remote, before)
}

// markConnected sets, in memory, whether the Remote's cluster could be
// reached, and when it last was.
func markConnected(remote *fleeetv1.Remote, cs metav1.ConditionStatus, reason, msg string) {
	remote.Status.Mode = fleeetv1.PushMode
	apimeta.RemoveStatusCondition(&remote.Status.Conditions, fleeetv1.StalledCondition)
	setConnected(remote, cs, reason, msg)
	if cs == metav1.ConditionTrue {
		now := metav1.Now()
		if last := remote.Status.LastHeartbeatTime; last == nil || now.Sub(last.Time) > time.Minute {
			remote.Status.LastHeartbeatTime = &now
		}
	}
}

// applyStatus writes the fields of a push Remote's status the push
// controller owns, if any changed.
func (p *PushReconciler) applyStatus(ctx context.Context, remote *fleeetv1.Remote, before *fleeetv1.RemoteStatus) error {
	remote.Status.ObservedGeneration = remote.Generation
	if equality.Semantic.DeepEqual(*before, remote.Status) {
		return nil
	}
	// Flux is kept as last read while the cluster cannot be reached.
	return status.Apply(ctx, p.Client, remote, status.PushManager, fleeetv1.RemoteStatus{
		ObservedGeneration: remote.Generation,
		Mode:               fleeetv1.PushMode,
		LastHeartbeatTime:  remote.Status.LastHeartbeatTime,
		Flux:               remote.Status.Flux,
		Conditions: status.Conditions(remote.Status.Conditions, fleeetv1.ConnectedCondition,
			fleeetv1.ReadyCondition, fleeetv1.StalledCondition, fleeetv1.FluxCompatibleCondition),
	})
}
