// Package bootstrap holds the manager's BootstrapModule controller: it
// applies a sync straight into push-mode Remotes, through Flux objects in the
// management cluster whose spec.kubeConfig.secretRef names each Remote's
// kubeconfig Secret. It is how Flux and the fleet agent reach a cluster that
// cannot pull yet. A kubeconfig is handed to Flux only once it passes the
// same checks the push controller makes (package kubeconfig), so a tenant
// cannot make the management cluster's Flux read its files or run commands
// should Flux be configured to allow it.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/bindings"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/finalizer"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/kubeconfig"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/watches"
)

// Reconciler applies BootstrapModules to push-mode Remotes.
type Reconciler struct {
	// Client reads from the cache and writes Flux objects and status.
	Client client.Client
	// Recorder records the failures of reconciles as events.
	Recorder events.EventRecorder
	// FieldOwner is the server-side apply field manager for Flux objects.
	FieldOwner string
	// Concurrent is how many BootstrapModules reconcile at once.
	Concurrent int
	// Kubeconfig says which kubeconfig fields beyond inline credentials an
	// operator accepts.
	Kubeconfig kubeconfig.Options

	// live reads kubeconfig Secrets, which the manager's cache holds by
	// their metadata alone (package secrets): the manager's API reader.
	live client.Reader
	// kubeconfigs remembers each kubeconfig's verdict at the version
	// checked, so a Secret is read again only once it changed: every
	// Remote's status write reconciles each BootstrapModule of its
	// namespace, which checks every Remote it selects.
	kubeconfigs secrets.Verdicts
}

// kubeconfigError says why a Remote's kubeconfig is not handed to Flux.
// Only a change of the Secret (or the Remote) fixes it.
type kubeconfigError struct {
	err error
}

func (e *kubeconfigError) Error() string { return e.err.Error() }

func (e *kubeconfigError) Unwrap() error { return e.err }

// SetupWithManager registers the controller; Flux status changes, Remote
// changes and Secret changes (a kubeconfig fixed) reach the BootstrapModules
// they concern. Kubeconfig Secrets are the tenants' and unlabelled, so
// their changes are heard through the metadata watch of every Secret
// (package secrets), which holds no Secret's data.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.live = mgr.GetAPIReader()
	inNamespace := watches.Referrers(r.Client, func() client.ObjectList { return &fleeetv1.BootstrapModuleList{} }, "")
	return flux.Owns(ctrl.NewControllerManagedBy(mgr).For(&fleeetv1.BootstrapModule{})).
		Watches(&fleeetv1.Remote{}, inNamespace).
		Watches(&corev1.Secret{}, inNamespace, builder.OnlyMetadata).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Concurrent)}).
		Complete(r)
}

// Reconcile applies one BootstrapModule to every push Remote it selects,
// removes it from those it no longer selects, and records the summary.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	bm := &fleeetv1.BootstrapModule{}
	if err := r.Client.Get(ctx, req.NamespacedName, bm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer status.NewPatcher(r.Client, r.Recorder, bm).Finish(ctx, &retErr)

	objs, err := r.observe(ctx, bm)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !bm.DeletionTimestamp.IsZero() {
		if err := r.remove(ctx, objs); err != nil || len(objs) > 0 {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, finalizer.Release(ctx, r.Client, bm, fleeetv1.BootstrapModuleFinalizer)
	}
	if err := finalizer.Add(ctx, r.Client, bm, fleeetv1.BootstrapModuleFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	if bm.Spec.Suspend {
		return ctrl.Result{}, nil
	}

	remotes, pulled, err := r.selectRemotes(ctx, bm)
	if _, invalid := errors.AsType[*invalidSelectorError](err); invalid {
		status.MarkStalled(bm, fleeetv1.ReasonInvalidSelector, err.Error())
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	sum, probs, err := r.reconcileRemotes(ctx, bm, remotes, objs)
	err = errors.Join(err, r.removeUnselected(ctx, objs, remotes))
	r.reconcileStatus(bm, sum, probs)
	reconcileReach(bm, pulled)
	return ctrl.Result{}, err
}

// invalidSelectorError says the BootstrapModule's selector does not parse:
// only a spec change mends it, so it stalls the BootstrapModule.
type invalidSelectorError struct{ error }

// selectRemotes lists the push Remotes the BootstrapModule selects, which
// are the ones the management cluster can reach, and the names of the pull
// Remotes it selects, which it cannot.
func (r *Reconciler) selectRemotes(ctx context.Context, bm *fleeetv1.BootstrapModule) (push []*fleeetv1.Remote, pull []string, _ error) {
	remotes := &fleeetv1.RemoteList{}
	if err := r.Client.List(ctx, remotes, client.InNamespace(bm.Namespace)); err != nil {
		return nil, nil, err
	}
	for i := range remotes.Items {
		remote := &remotes.Items[i]
		ok, err := compile.Selects(bm.Spec.Selector, remote)
		switch {
		case err != nil:
			return nil, nil, &invalidSelectorError{err}
		case !ok:
		case remote.Spec.KubeconfigRef != nil:
			push = append(push, remote)
		default:
			pull = append(pull, remote.Name)
		}
	}
	return push, pull, nil
}

// maxNamed is how many unreachable Remotes RemotesReachable names, so its
// message stays short whatever the fleet's size.
const maxNamed = 5

// reconcileReach records the selected pull Remotes, which the
// BootstrapModule does not apply to: their count, and RemotesReachable
// False naming the first few by name; True when there are none.
func reconcileReach(bm *fleeetv1.BootstrapModule, pull []string) {
	bm.Status.Unreachable = int32(len(pull))
	if len(pull) == 0 {
		status.SetCondition(&bm.Status.Conditions, bm.Generation, fleeetv1.RemotesReachableCondition, metav1.ConditionTrue,
			fleeetv1.ReasonPushRemotesOnly, "every selected Remote is a push Remote")
		return
	}
	slices.Sort(pull)
	named := strings.Join(pull[:min(len(pull), maxNamed)], ", ")
	if len(pull) > maxNamed {
		named += fmt.Sprintf(" and %d more", len(pull)-maxNamed)
	}
	status.SetCondition(&bm.Status.Conditions, bm.Generation, fleeetv1.RemotesReachableCondition, metav1.ConditionFalse,
		fleeetv1.ReasonPullRemotesSelected, "not applied to the selected pull Remotes, which the management cluster "+
			"cannot reach (spec.selector): "+named)
}

// reconcileRemotes brings the sync to each selected push Remote and counts
// where it stands. A Remote the sync cannot reach for a reason its status
// names is a problem, not an error; the other errors are returned joined,
// after every Remote had its turn.
func (r *Reconciler) reconcileRemotes(ctx context.Context, bm *fleeetv1.BootstrapModule, remotes []*fleeetv1.Remote, objs map[string]flux.Objects) (fleeetv1.ModuleSummary, problems, error) {
	sum := fleeetv1.ModuleSummary{}
	var probs problems
	var errs []error
	for _, remote := range remotes {
		sum.Total++
		if remote.Offline() {
			sum.Offline++
		}
		v, err := r.reconcileRemote(ctx, bm, remote, objs[remote.Name])
		if err != nil {
			if err := probs.add(remote.Name, err); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		sum.Updated++
		switch v.State {
		case fleeetv1.SyncReady:
			sum.Ready++
		case fleeetv1.SyncFailed:
			sum.Failed++
			probs.failures = append(probs.failures, fmt.Sprintf("remote %s: %s", remote.Name, v.Message))
		}
	}
	return sum, probs, errors.Join(errs...)
}

// removeUnselected removes the sync from every Remote that holds it and is
// no longer selected.
func (r *Reconciler) removeUnselected(ctx context.Context, objs map[string]flux.Objects, selected []*fleeetv1.Remote) error {
	stale := maps.Clone(objs)
	for _, remote := range selected {
		delete(stale, remote.Name)
	}
	return r.remove(ctx, stale)
}

// reconcileRemote applies the sync to one Remote if what runs differs, and
// judges the Flux objects that run it. A Remote whose kubeconfig the manager
// refuses gets nothing new applied; a *kubeconfigError says why.
func (r *Reconciler) reconcileRemote(ctx context.Context, bm *fleeetv1.BootstrapModule, remote *fleeetv1.Remote, o flux.Objects) (flux.Verdict, error) {
	if err := r.checkKubeconfig(ctx, remote); err != nil {
		return flux.Verdict{}, err
	}
	sync, err := compile.Sync(ctx, r.Client, bm, &bm.Spec.SyncPlacement, remote)
	if err != nil {
		return flux.Verdict{}, err
	}
	ref := remote.Spec.KubeconfigRef
	x, err := flux.Expand(flux.Target{
		Owner:      remote.Name,
		Namespace:  bm.Namespace,
		Labels:     map[string]string{fleeetv1.BootstrapModuleLabel: bm.Name, fleeetv1.RemoteLabel: remote.Name},
		KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: ref.Name, Key: ref.Key}},
	}, &sync, nil, nil)
	if err != nil {
		return flux.Verdict{}, err
	}
	if o.SpecHash() != x.Applier.GetAnnotations()[fleeetv1.SpecHashAnnotation] {
		for _, obj := range []client.Object{x.Source, x.Applier} {
			if err := flux.Apply(ctx, r.Client, bm, obj, r.FieldOwner); err != nil {
				return flux.Verdict{}, fmt.Errorf("applying to remote %s: %w", remote.Name, err)
			}
		}
		return flux.Verdict{State: fleeetv1.SyncProgressing, Message: "applied " + x.Want.String()}, nil
	}
	return flux.Judge(o, x.Want), nil
}

// checkKubeconfig loads the Remote's kubeconfig with the push controller's
// rules before Flux is pointed at it. Flux refuses files and, unless started
// with --insecure-kubeconfig-exec and --insecure-kubeconfig-tls, drops exec
// and insecure-skip-tls-verify itself; checking here as well names the
// refused field on the BootstrapModule, holds to the manager's own flags
// whatever Flux's are, and refuses proxy-url, which Flux honours. The
// Secret is read from the apiserver, and only when it changed since it was
// last checked (secrets.Verdicts).
func (r *Reconciler) checkKubeconfig(ctx context.Context, remote *fleeetv1.Remote) error {
	ref := remote.Spec.KubeconfigRef
	err := r.kubeconfigs.Check(ctx, r.Client, r.live, client.ObjectKey{Namespace: remote.Namespace, Name: ref.Name}, ref.Key,
		func(secret *corev1.Secret) error {
			data, ok := secret.Data[ref.Key]
			if !ok {
				return &kubeconfigError{fmt.Errorf("spec.kubeconfigRef: Secret %s has no key %q", ref.Name, ref.Key)}
			}
			if _, err := kubeconfig.Load(data, r.Kubeconfig); err != nil {
				return &kubeconfigError{fmt.Errorf("spec.kubeconfigRef: Secret %s key %q: %w", ref.Name, ref.Key, err)}
			}
			return nil
		})
	switch {
	case apierrors.IsNotFound(err):
		return &kubeconfigError{fmt.Errorf("spec.kubeconfigRef: Secret %s not found", ref.Name)}
	case err != nil && !errors.As(err, new(*kubeconfigError)):
		return fmt.Errorf("reading the kubeconfig Secret of remote %s: %w", remote.Name, err)
	}
	return err
}

// observe lists the BootstrapModule's Flux objects by Remote.
func (r *Reconciler) observe(ctx context.Context, bm *fleeetv1.BootstrapModule) (map[string]flux.Objects, error) {
	return flux.List(ctx, r.Client, bm.Namespace, map[string]string{fleeetv1.BootstrapModuleLabel: bm.Name}, fleeetv1.RemoteLabel)
}

// remove deletes the Flux objects of the given Remotes; Flux prunes what
// they applied in the Remote's cluster.
func (r *Reconciler) remove(ctx context.Context, objs map[string]flux.Objects) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(objs)) {
		for _, obj := range []client.Object{objs[name].Applier, objs[name].Source} {
			if obj == nil || !obj.GetDeletionTimestamp().IsZero() {
				continue
			}
			if err := r.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("removing from remote %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// problems are what keeps selected Remotes from running the sync, one
// message per Remote, by kind.
type problems struct {
	// bindings are control-plane bindings that do not resolve.
	bindings []string
	// kubeconfigs are kubeconfigs not handed to Flux; refused says whether
	// one of them uses a refused field.
	kubeconfigs []string
	refused     bool
	// failures are Flux objects that failed.
	failures []string
}

// add records err against the Remote when the status names it — a binding
// that does not resolve, a kubeconfig not handed to Flux — and returns any
// other error.
func (p *problems) add(remote string, err error) error {
	var be *bindings.Error
	var ke *kubeconfigError
	switch {
	case errors.As(err, &be):
		p.bindings = append(p.bindings, fmt.Sprintf("remote %s: %v", remote, err))
	case errors.As(err, &ke):
		p.kubeconfigs = append(p.kubeconfigs, fmt.Sprintf("remote %s: %v", remote, err))
		if _, ok := errors.AsType[*kubeconfig.RefusedError](err); ok {
			p.refused = true
		}
	default:
		return err
	}
	return nil
}

// reconcileStatus records the summary and conditions: Ready once every
// selected online push Remote runs the sync Ready, otherwise Ready=False for
// the first kind of problem.
func (r *Reconciler) reconcileStatus(bm *fleeetv1.BootstrapModule, sum fleeetv1.ModuleSummary, probs problems) {
	bm.Status.Summary = sum
	bm.Status.Version = compile.Version(&bm.Spec.Sync)
	progress := fmt.Sprintf("%d of %d push Remotes ready at %s", sum.Ready, sum.Total, bm.Status.Version)
	switch {
	case len(probs.bindings) > 0:
		status.MarkFailed(bm, fleeetv1.ReasonBindingFailed, strings.Join(probs.bindings, "; "))
	case len(probs.kubeconfigs) > 0:
		reason := fleeetv1.ReasonKubeconfigInvalid
		if probs.refused {
			reason = fleeetv1.ReasonKubeconfigRefused
		}
		status.MarkFailed(bm, reason, strings.Join(probs.kubeconfigs, "; "))
	case len(probs.failures) > 0:
		status.MarkFailed(bm, fleeetv1.ReasonRemoteFailed, strings.Join(probs.failures, "; "))
	case sum.Ready+sum.Offline >= sum.Total:
		status.MarkReady(bm, fleeetv1.ReasonSucceeded, progress)
	default:
		status.MarkProgressing(bm, fleeetv1.ReasonProgressing, progress)
	}
}
