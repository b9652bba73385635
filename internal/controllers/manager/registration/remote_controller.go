package registration

import (
	"context"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/finalizer"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/watches"
)

// RemoteReconciler gives each pull Remote registered through a RegistrationToken its
// cluster identity: the token's labels, a ServiceAccount with a Role limited
// by name to the Remote's own objects, the Lease it renews as heartbeat, and
// its first credential in a Secret only the registration identity may read,
// deleted once the agent has connected.
//
// A Remote names the token it came through in its
// fleeet.dev/registration-token label, which the admission policies let
// only that token's identity set. It is registered once the token records
// its UID (see TokenReconciler); a Remote the token will never record, because the
// token was used up or had expired when the Remote was created, is refused
// and deleted.
type RemoteReconciler struct {
	// Client reads from the cache and writes identities, Secrets and status.
	Client client.Client
	// APIReader reads identity objects uncached where a lagging cache would
	// hold a registration back or leave a revoked identity behind; nil
	// reads through Client only.
	APIReader client.Reader
	// Recorder records credential hand-overs and revocations on Remotes.
	Recorder events.EventRecorder
	// Concurrent is how many Remotes reconcile at once.
	Concurrent int
}

// SetupWithManager registers the controller.
func (r *RemoteReconciler) SetupWithManager(_ context.Context, mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("remote-identity").
		For(&fleeetv1.Remote{}).
		Watches(&fleeetv1.RegistrationToken{}, handler.EnqueueRequestsFromMapFunc(r.remotesOfToken)).
		Watches(&coordinationv1.Lease{}, watches.SameName).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&corev1.Secret{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Concurrent)}).
		Complete(r)
}

// remotesOfToken maps a token to the Remotes created through it: a
// recording, or the token filling up or expiring, decides their fate.
func (r *RemoteReconciler) remotesOfToken(ctx context.Context, o client.Object) []reconcile.Request {
	remotes := &fleeetv1.RemoteList{}
	if err := r.Client.List(ctx, remotes, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy,
		client.MatchingLabels{fleeetv1.RegistrationTokenLabel: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the Remotes of a RegistrationToken", "metadata.name", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(remotes.Items))
	for i := range remotes.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&remotes.Items[i])})
	}
	return reqs
}

// Reconcile gives one registered pull Remote its identity, or takes it away
// when the Remote is being deleted.
func (r *RemoteReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	remote := &fleeetv1.Remote{}
	if err := r.Client.Get(ctx, req.NamespacedName, remote); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	id := identity{owner: remote, name: fleeetv1.RemoteIdentityName(remote.Name), rules: RemoteRules(remote.Name)}
	if !remote.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(remote, fleeetv1.RemoteIdentityFinalizer) {
			return ctrl.Result{}, nil
		}
		if err := id.remove(ctx, r.Client, r.APIReader, r.credentialSecret(remote), r.lease(remote)); err != nil {
			return ctrl.Result{}, err
		}
		r.Recorder.Eventf(remote, nil, corev1.EventTypeNormal, "Revoked", "Revoke",
			"Deleted cluster identity %s: its tokens no longer authenticate", id.name)
		return ctrl.Result{}, finalizer.Release(ctx, r.Client, remote, fleeetv1.RemoteIdentityFinalizer)
	}
	if remote.Spec.KubeconfigRef != nil {
		return ctrl.Result{}, nil
	}
	tok, reg, err := r.registrationOf(ctx, remote)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := remote.Status.DeepCopy()
	switch {
	case tok == nil:
		// A registered Remote whose token is gone keeps what its
		// registration freed: it was recorded on the Remote.
		if _, adopted := remote.Annotations[fleeetv1.FreeLabelKeysAnnotation]; adopted {
			if err := r.relabel(ctx, remote); err != nil {
				return ctrl.Result{}, err
			}
		}
		r.setRegistered(remote, metav1.ConditionFalse, fleeetv1.ReasonNotRegistered,
			"this pull Remote was not created through a RegistrationToken, so no cluster holds a credential for it")
		return ctrl.Result{}, r.applyStatus(ctx, remote, before)
	case reg == nil:
		if why := refusal(tok, remote); why != "" {
			return ctrl.Result{}, r.refuse(ctx, remote, tok, why)
		}
		// The token's watch brings the Remote back once it is recorded.
		r.setRegistered(remote, metav1.ConditionFalse, fleeetv1.ReasonRegistrationPending,
			fmt.Sprintf("waiting for RegistrationToken %s to record this registration", tok.Name))
		return ctrl.Result{}, r.applyStatus(ctx, remote, before)
	}
	if err := r.adopt(ctx, remote, tok); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.relabel(ctx, remote); err != nil {
		return ctrl.Result{}, err
	}
	id.labels = map[string]string{fleeetv1.RegistrationTokenLabel: tok.Name}
	lease, err := r.ensureLease(ctx, remote, id.labels)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !metav1.IsControlledBy(lease, remote) {
		// Its renewals would pass for the agent connecting, and the
		// cluster would be given rights on it. The Lease's watch brings the
		// Remote back once it is gone.
		r.setRegistered(remote, metav1.ConditionFalse, fleeetv1.ReasonLeaseConflict, fmt.Sprintf(
			"Lease %s/%s exists and is not controlled by this Remote; the manager makes the cluster's heartbeat Lease itself and adopts no other, so no identity is issued until that Lease is deleted",
			lease.Namespace, lease.Name))
		return ctrl.Result{}, r.applyStatus(ctx, remote, before)
	}
	if err := id.ensure(ctx, r.Client, r.APIReader); err != nil {
		return ctrl.Result{}, err
	}
	result, err := r.deliver(ctx, remote, tok, reg, lease.Spec.RenewTime != nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	return result, r.applyStatus(ctx, remote, before)
}

// registrationOf finds the token the Remote came through, from its label,
// and the token's record of this very Remote, by UID, so a Remote created
// later under a registered name is not mistaken for the registered one. The
// token is nil for a Remote created otherwise, or whose token is gone; the
// record is nil until the token has recorded the Remote.
func (r *RemoteReconciler) registrationOf(ctx context.Context, remote *fleeetv1.Remote) (*fleeetv1.RegistrationToken, *fleeetv1.Registration, error) {
	name, ok := remote.Labels[fleeetv1.RegistrationTokenLabel]
	if !ok {
		return nil, nil, nil
	}
	tok := &fleeetv1.RegistrationToken{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: remote.Namespace, Name: name}, tok); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	for i, reg := range tok.Status.Registered {
		if reg.UID == remote.UID {
			return tok, &tok.Status.Registered[i], nil
		}
	}
	return tok, nil, nil
}

// refuse records why the Remote will not be registered, on the Remote and
// on its token, and deletes the Remote: the agent that created it then
// learns the reason from admission when it tries again.
func (r *RemoteReconciler) refuse(ctx context.Context, remote *fleeetv1.Remote, tok *fleeetv1.RegistrationToken, why string) error {
	before := remote.Status.DeepCopy()
	r.setRegistered(remote, metav1.ConditionFalse, fleeetv1.ReasonRegistrationRefused, why+"; the Remote is deleted")
	if err := r.applyStatus(ctx, remote, before); err != nil {
		return err
	}
	r.Recorder.Eventf(tok, remote, corev1.EventTypeWarning, fleeetv1.ReasonRegistrationRefused, "Refuse",
		"Refused Remote %s: %s; deleting it", remote.Name, why)
	uid := remote.UID
	if err := r.Client.Delete(ctx, remote, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting refused Remote: %w", err)
	}
	return nil
}

// adopt adds the finalizer and the token's labels. At adoption the Remote
// keeps, of the labels its registrant chose, only those under keys the
// token frees (admission refuses others already; this holds should the
// policies have been bypassed or changed), and records the keys the token
// frees (FreeLabelKeysAnnotation; on a Remote registered before, the first
// time it is seen), which govern its cluster's later label requests.
// Afterwards the tenant may label the Remote as it likes, but the token's
// labels win.
func (r *RemoteReconciler) adopt(ctx context.Context, remote *fleeetv1.Remote, tok *fleeetv1.RegistrationToken) error {
	adopted := controllerutil.ContainsFinalizer(remote, fleeetv1.RemoteIdentityFinalizer)
	labels := maps.Clone(remote.Labels)
	if labels == nil || !adopted {
		labels = map[string]string{fleeetv1.RegistrationTokenLabel: tok.Name}
		for _, k := range tok.Spec.FreeLabelKeys {
			if v, ok := remote.Labels[k]; ok {
				labels[k] = v
			}
		}
	}
	maps.Copy(labels, tok.Spec.RemoteLabels)
	annotations := maps.Clone(remote.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	if _, recorded := annotations[fleeetv1.FreeLabelKeysAnnotation]; !recorded || !adopted {
		annotations[fleeetv1.FreeLabelKeysAnnotation] = freedKeys(tok)
	}
	if adopted && maps.Equal(labels, remote.Labels) && maps.Equal(annotations, remote.Annotations) {
		return nil
	}
	patch := client.MergeFrom(remote.DeepCopy())
	controllerutil.AddFinalizer(remote, fleeetv1.RemoteIdentityFinalizer)
	remote.Labels, remote.Annotations = labels, annotations
	if err := r.Client.Patch(ctx, remote, patch); err != nil {
		return fmt.Errorf("labelling Remote: %w", err)
	}
	return nil
}

// ensureLease creates the Lease the agent renews; the agent may update it
// but not create it, since create cannot be limited by name. A Lease that
// already exists is returned as it is, for the caller to check it is the
// Remote's own.
func (r *RemoteReconciler) ensureLease(ctx context.Context, remote *fleeetv1.Remote, labels map[string]string) (*coordinationv1.Lease, error) {
	lease := r.lease(remote)
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(lease), lease)
	if !apierrors.IsNotFound(err) {
		return lease, err
	}
	lease.Labels = labels
	holder := fleeetv1.RemoteIdentityName(remote.Name)
	lease.Spec.HolderIdentity = &holder
	if err := controllerutil.SetControllerReference(remote, lease, r.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := create(ctx, r.Client, r.APIReader, lease); err != nil {
		return nil, fmt.Errorf("creating Lease: %w", err)
	}
	return lease, nil
}

// deliver offers the first credential until the agent connects or the
// delivery deadline passes, then deletes it.
func (r *RemoteReconciler) deliver(ctx context.Context, remote *fleeetv1.Remote, tok *fleeetv1.RegistrationToken, reg *fleeetv1.Registration, connected bool) (ctrl.Result, error) {
	secret := r.credentialSecret(remote)
	deadline := reg.Time.Add(credential.DeliveryDeadline)
	via := fmt.Sprintf("registered with RegistrationToken %s as %s", tok.Name, fleeetv1.RemoteIdentityName(remote.Name))
	if connected || !time.Now().Before(deadline) {
		if err := r.retireFirstCredential(ctx, remote, secret); err != nil {
			return ctrl.Result{}, err
		}
		if connected {
			r.setRegistered(remote, metav1.ConditionTrue, fleeetv1.ReasonRegistered, via+"; the agent holds its own credential")
		} else {
			r.setRegistered(remote, metav1.ConditionFalse, fleeetv1.ReasonCredentialNotPickedUp, fmt.Sprintf(
				"%s, but no agent connected within %s; delete this Remote and register the cluster again", via, credential.DeliveryDeadline))
		}
		return ctrl.Result{}, nil
	}
	err := secrets.GetOwned(ctx, r.Client, r.APIReader, remote, client.ObjectKeyFromObject(secret), secret)
	switch {
	case apierrors.IsNotFound(err):
		secret.Labels = secrets.Labels(map[string]string{fleeetv1.RegistrationTokenLabel: tok.Name})
		if err := controllerutil.SetControllerReference(remote, secret, r.Client.Scheme()); err != nil {
			return ctrl.Result{}, err
		}
		if err := create(ctx, r.Client, r.APIReader, secret); err != nil {
			return ctrl.Result{}, fmt.Errorf("creating first-credential Secret: %w", err)
		}
	case err != nil:
		return ctrl.Result{}, err
	}
	if _, err := credential.TokenFromSecret(secret); err != nil {
		token, err := credential.Mint(ctx, r.Client, remote.Namespace, fleeetv1.RemoteIdentityName(remote.Name), credential.FirstLifetime, secret)
		if err != nil {
			return ctrl.Result{}, err
		}
		secret.Data = token.SecretData()
		if err := r.Client.Update(ctx, secret); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing first-credential Secret: %w", err)
		}
		r.Recorder.Eventf(remote, nil, corev1.EventTypeNormal, fleeetv1.ReasonCredentialIssued, "Register",
			"Issued the first credential of %s in Secret %s", fleeetv1.RemoteIdentityName(remote.Name), secret.Name)
	}
	r.setRegistered(remote, metav1.ConditionTrue, fleeetv1.ReasonCredentialIssued, via+"; waiting for the agent to pick up its credential")
	return ctrl.Result{RequeueAfter: time.Until(deadline) + time.Second}, nil
}

// retireFirstCredential deletes the first-credential Secret while the
// cache holds it, whole or, for one written before the manager labelled
// its Secrets, by its metadata (secrets.GetOwned). Every heartbeat of a
// connected cluster brings its Remote back here, so deleting
// unconditionally would send the apiserver one DELETE that finds nothing
// per cluster per heartbeat. A Secret the cache has not seen yet brings
// the Remote back when it does (the controller owns it), and is deleted
// then.
func (r *RemoteReconciler) retireFirstCredential(ctx context.Context, remote *fleeetv1.Remote, secret *corev1.Secret) error {
	err := secrets.GetOwned(ctx, r.Client, r.APIReader, remote, client.ObjectKeyFromObject(secret), secret)
	if err == nil {
		err = r.Client.Delete(ctx, secret, client.Preconditions{UID: &secret.UID})
	}
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting first-credential Secret: %w", err)
	}
	return nil
}

// applyStatus writes the Registered and LabelsApplied conditions, the
// fields of a Remote's status registration owns, if they changed.
func (r *RemoteReconciler) applyStatus(ctx context.Context, remote *fleeetv1.Remote, before *fleeetv1.RemoteStatus) error {
	if equality.Semantic.DeepEqual(*before, remote.Status) {
		return nil
	}
	return status.Apply(ctx, r.Client, remote, status.RegistrationManager, fleeetv1.RemoteStatus{
		ObservedGeneration: remote.Generation,
		Conditions:         status.Conditions(remote.Status.Conditions, fleeetv1.RegisteredCondition, fleeetv1.LabelsAppliedCondition),
	})
}

func (r *RemoteReconciler) setRegistered(remote *fleeetv1.Remote, cs metav1.ConditionStatus, reason, msg string) {
	status.SetCondition(&remote.Status.Conditions, remote.Generation, fleeetv1.RegisteredCondition, cs, reason, msg)
}

func (r *RemoteReconciler) credentialSecret(remote *fleeetv1.Remote) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: remote.Namespace, Name: fleeetv1.RemoteIdentityName(remote.Name)}}
}

func (r *RemoteReconciler) lease(remote *fleeetv1.Remote) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: remote.Namespace, Name: remote.Name}}
}

// agentConnected tells whether the agent of the Remote has renewed its
// Lease at least once, which it does with its own credential. A Lease the
// Remote does not control says nothing about its agent.
func agentConnected(ctx context.Context, c client.Client, remote *fleeetv1.Remote) (bool, error) {
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(remote), lease); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return metav1.IsControlledBy(lease, remote) && lease.Spec.RenewTime != nil, nil
}
