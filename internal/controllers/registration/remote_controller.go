package registration

import (
	"context"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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
	"github.com/fleeet-dev/fleeet/internal/enrol"
	"github.com/fleeet-dev/fleeet/internal/finalizer"
	"github.com/fleeet-dev/fleeet/internal/status"
	"github.com/fleeet-dev/fleeet/internal/watches"
)

// RemoteFinalizer holds a registered Remote until its cluster identity is
// deleted, so deleting the Remote revokes the cluster at once.
const RemoteFinalizer = "fleeet.dev/remote-identity"

// RegisteredRemoteIndex indexes RegistrationTokens by the Remotes registered with them.
const RegisteredRemoteIndex = "status.registered.name"

// Reasons used in the Registered condition of Remotes.
const (
	ReasonRegistered    = "Registered"
	ReasonNotRegistered = "NotRegistered"
	ReasonNotPickedUp   = "CredentialNotPickedUp"
	ReasonIssued        = "CredentialIssued"
)

// Remotes gives each pull Remote registered through a RegistrationToken its
// cluster identity: the token's labels, a ServiceAccount with a Role limited
// by name to the Remote's own objects, the Lease it renews as heartbeat, and
// its first credential in a Secret only the registration identity may read,
// deleted once the agent has connected.
type Remotes struct {
	// Client reads from the cache and writes identities, Secrets and status.
	Client client.Client
	// Recorder records credential hand-overs and revocations on Remotes.
	Recorder events.EventRecorder
	// Concurrent is how many Remotes reconcile at once.
	Concurrent int
}

// SetupWithManager registers the controller.
func (r *Remotes) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &fleeetv1.RegistrationToken{}, RegisteredRemoteIndex, func(o client.Object) []string {
		var names []string
		for _, reg := range o.(*fleeetv1.RegistrationToken).Status.Registered {
			names = append(names, reg.Name)
		}
		return names
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("remote-identity").
		For(&fleeetv1.Remote{}).
		Watches(&fleeetv1.RegistrationToken{}, handler.EnqueueRequestsFromMapFunc(registeredRemotes)).
		Watches(&coordinationv1.Lease{}, watches.SameName).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&corev1.Secret{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Concurrent)}).
		Complete(r)
}

func registeredRemotes(_ context.Context, o client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, reg := range o.(*fleeetv1.RegistrationToken).Status.Registered {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: reg.Name}})
	}
	return reqs
}

// Reconcile gives one registered pull Remote its identity, or takes it away
// when the Remote is being deleted.
func (r *Remotes) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	remote := &fleeetv1.Remote{}
	if err := r.Client.Get(ctx, req.NamespacedName, remote); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	id := identity{owner: remote, name: enrol.RemoteIdentityName(remote.Name), rules: remoteRules(remote.Name)}
	if !remote.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(remote, RemoteFinalizer) {
			return ctrl.Result{}, nil
		}
		if err := id.remove(ctx, r.Client, r.credentialSecret(remote), r.lease(remote)); err != nil {
			return ctrl.Result{}, err
		}
		r.Recorder.Eventf(remote, nil, corev1.EventTypeNormal, "Revoked", "Revoke",
			"Deleted cluster identity %s: its tokens no longer authenticate", id.name)
		return ctrl.Result{}, finalizer.Release(ctx, r.Client, remote, RemoteFinalizer)
	}
	if remote.Spec.KubeconfigRef != nil {
		return ctrl.Result{}, nil
	}
	tok, reg, err := r.registrationOf(ctx, remote)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := remote.Status.DeepCopy()
	if tok == nil {
		r.setRegistered(remote, metav1.ConditionFalse, ReasonNotRegistered,
			"this pull Remote was not created through a RegistrationToken, so no cluster holds a credential for it")
		return ctrl.Result{}, status.Update(ctx, r.Client, remote, *before, remote.Status)
	}
	if err := r.adopt(ctx, remote, tok); err != nil {
		return ctrl.Result{}, err
	}
	id.labels = map[string]string{fleeetv1.RegistrationTokenLabel: tok.Name}
	if err := id.ensure(ctx, r.Client); err != nil {
		return ctrl.Result{}, err
	}
	lease, err := r.ensureLease(ctx, remote, id.labels)
	if err != nil {
		return ctrl.Result{}, err
	}
	result, err := r.deliver(ctx, remote, tok, reg, lease.Spec.RenewTime != nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	return result, status.Update(ctx, r.Client, remote, *before, remote.Status)
}

// registrationOf finds the token that admitted this very Remote: same name
// and same UID, so a Remote created later under a registered name is not
// mistaken for the registered one.
func (r *Remotes) registrationOf(ctx context.Context, remote *fleeetv1.Remote) (*fleeetv1.RegistrationToken, *fleeetv1.Registration, error) {
	tokens := &fleeetv1.RegistrationTokenList{}
	if err := r.Client.List(ctx, tokens, client.InNamespace(remote.Namespace), client.MatchingFields{RegisteredRemoteIndex: remote.Name}); err != nil {
		return nil, nil, err
	}
	for i := range tokens.Items {
		for j, reg := range tokens.Items[i].Status.Registered {
			if reg.Name == remote.Name && reg.UID == remote.UID {
				return &tokens.Items[i], &tokens.Items[i].Status.Registered[j], nil
			}
		}
	}
	return nil, nil, nil
}

// adopt adds the finalizer and the token's labels, which win over labels
// the agent asked for.
func (r *Remotes) adopt(ctx context.Context, remote *fleeetv1.Remote, tok *fleeetv1.RegistrationToken) error {
	labels := maps.Clone(remote.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, tok.Spec.RemoteLabels)
	if controllerutil.ContainsFinalizer(remote, RemoteFinalizer) && maps.Equal(labels, remote.Labels) {
		return nil
	}
	patch := client.MergeFrom(remote.DeepCopy())
	controllerutil.AddFinalizer(remote, RemoteFinalizer)
	remote.Labels = labels
	if err := r.Client.Patch(ctx, remote, patch); err != nil {
		return fmt.Errorf("labelling Remote: %w", err)
	}
	return nil
}

// ensureLease creates the Lease the agent renews; the agent may update it
// but not create it, since create cannot be limited by name.
func (r *Remotes) ensureLease(ctx context.Context, remote *fleeetv1.Remote, labels map[string]string) (*coordinationv1.Lease, error) {
	lease := r.lease(remote)
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(lease), lease)
	if !apierrors.IsNotFound(err) {
		return lease, err
	}
	lease.Labels = labels
	holder := enrol.RemoteIdentityName(remote.Name)
	lease.Spec.HolderIdentity = &holder
	if err := controllerutil.SetControllerReference(remote, lease, r.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Client.Create(ctx, lease); err != nil {
		return nil, fmt.Errorf("creating Lease: %w", err)
	}
	return lease, nil
}

// deliver offers the first credential until the agent connects or the
// delivery deadline passes, then deletes it.
func (r *Remotes) deliver(ctx context.Context, remote *fleeetv1.Remote, tok *fleeetv1.RegistrationToken, reg *fleeetv1.Registration, connected bool) (ctrl.Result, error) {
	secret := r.credentialSecret(remote)
	deadline := reg.Time.Add(enrol.DeliveryDeadline)
	via := fmt.Sprintf("registered with RegistrationToken %s as %s", tok.Name, enrol.RemoteIdentityName(remote.Name))
	if connected || !time.Now().Before(deadline) {
		if err := client.IgnoreNotFound(r.Client.Delete(ctx, secret)); err != nil {
			return ctrl.Result{}, fmt.Errorf("deleting first-credential Secret: %w", err)
		}
		if connected {
			r.setRegistered(remote, metav1.ConditionTrue, ReasonRegistered, via+"; the agent holds its own credential")
		} else {
			r.setRegistered(remote, metav1.ConditionFalse, ReasonNotPickedUp, fmt.Sprintf(
				"%s, but no agent connected within %s; delete this Remote and enrol the cluster again", via, enrol.DeliveryDeadline))
		}
		return ctrl.Result{}, nil
	}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret)
	switch {
	case apierrors.IsNotFound(err):
		secret.Labels = map[string]string{fleeetv1.RegistrationTokenLabel: tok.Name}
		if err := controllerutil.SetControllerReference(remote, secret, r.Client.Scheme()); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Client.Create(ctx, secret); err != nil {
			return ctrl.Result{}, fmt.Errorf("creating first-credential Secret: %w", err)
		}
	case err != nil:
		return ctrl.Result{}, err
	}
	if _, err := enrol.TokenFromSecret(secret); err != nil {
		token, err := enrol.Mint(ctx, r.Client, remote.Namespace, enrol.RemoteIdentityName(remote.Name), enrol.FirstCredentialLifetime, secret)
		if err != nil {
			return ctrl.Result{}, err
		}
		secret.Data = token.SecretData()
		if err := r.Client.Update(ctx, secret); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing first-credential Secret: %w", err)
		}
		r.Recorder.Eventf(remote, nil, corev1.EventTypeNormal, ReasonIssued, "Register",
			"Issued the first credential of %s in Secret %s", enrol.RemoteIdentityName(remote.Name), secret.Name)
	}
	r.setRegistered(remote, metav1.ConditionTrue, ReasonIssued, via+"; waiting for the agent to pick up its credential")
	return ctrl.Result{RequeueAfter: time.Until(deadline) + time.Second}, nil
}

func (r *Remotes) setRegistered(remote *fleeetv1.Remote, cs metav1.ConditionStatus, reason, msg string) {
	status.SetCondition(&remote.Status.Conditions, remote.Generation, fleeetv1.RegisteredCondition, cs, reason, msg)
}

func (r *Remotes) credentialSecret(remote *fleeetv1.Remote) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: remote.Namespace, Name: enrol.RemoteIdentityName(remote.Name)}}
}

func (r *Remotes) lease(remote *fleeetv1.Remote) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: remote.Namespace, Name: remote.Name}}
}

// agentConnected tells whether the agent of the Remote key has renewed its
// Lease at least once, which it does with its own credential.
func agentConnected(ctx context.Context, c client.Client, key client.ObjectKey) (bool, error) {
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, key, lease); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return lease.Spec.RenewTime != nil, nil
}
