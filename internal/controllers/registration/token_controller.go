package registration

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
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
)

// TokenFinalizer holds a RegistrationToken until its identity is deleted.
const TokenFinalizer = "fleeet.dev/registration-token"

// storeWait is how long an admitted registration whose Remote is not yet
// visible counts as in flight.
const storeWait = 30 * time.Second

// DefaultTTL is a RegistrationToken's lifetime when spec.ttl is unset.
const DefaultTTL = time.Hour

// Reasons used in RegistrationToken conditions.
const (
	ReasonActive             = "Active"
	ReasonExpired            = "Expired"
	ReasonUsedUp             = "UsedUp"
	ReasonManagementURLUnset = "ManagementURLUnset"
	ReasonIdentityFailed     = "IdentityFailed"
	ReasonRetired            = "Retired"
)

// Tokens keeps each RegistrationToken's registration identity and Secret
// while the token may be used, and deletes the identity, which kills its
// bearer token, once the token has expired or is used up and every
// registered cluster has picked up its first credential.
type Tokens struct {
	// Client reads from the cache and writes identities, Secrets and status.
	Client client.Client
	// Recorder records identity retirements on tokens.
	Recorder events.EventRecorder
	// Management is the API URL and CA bundle written into agent values;
	// the namespace is each token's own.
	Management enrol.Management
	// Concurrent is how many tokens reconcile at once.
	Concurrent int
}

// SetupWithManager registers the controller. Every object the controller
// writes for a token carries the token's label, so one map function brings
// their changes back, including the credential Secrets of registered Remotes.
func (t *Tokens) SetupWithManager(mgr ctrl.Manager) error {
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name, ok := o.GetLabels()[fleeetv1.RegistrationTokenLabel]
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("registrationtoken").
		For(&fleeetv1.RegistrationToken{}).
		Watches(&corev1.Secret{}, byLabel).
		Watches(&corev1.ServiceAccount{}, byLabel).
		Watches(&coordinationv1.Lease{}, byLabel).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, t.Concurrent)}).
		Complete(t)
}

// Reconcile brings one token's identity and Secret in line with whether the
// token may still be used.
func (t *Tokens) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	tok := &fleeetv1.RegistrationToken{}
	if err := t.Client.Get(ctx, req.NamespacedName, tok); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	id := identity{owner: tok, name: enrol.RegistrationName(tok.Name),
		labels: map[string]string{fleeetv1.RegistrationTokenLabel: tok.Name}}
	if !tok.DeletionTimestamp.IsZero() {
		if err := id.remove(ctx, t.Client, t.secret(tok)); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, finalizer.Release(ctx, t.Client, tok, TokenFinalizer)
	}
	if err := finalizer.Add(ctx, t.Client, tok, TokenFinalizer); err != nil {
		return ctrl.Result{}, err
	}

	before := tok.Status.DeepCopy()
	defer func() {
		tok.Status.ObservedGeneration = tok.Generation
		if err := status.Update(ctx, t.Client, tok, *before, tok.Status); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()
	now := time.Now()
	expires := ExpiresAt(tok)
	tok.Status.ExpiresAt = &metav1.Time{Time: expires}
	tok.Status.Registrations = int32(len(tok.Status.Registered))
	pending, nextDeadline, err := t.pendingDeliveries(ctx, tok, now)
	if err != nil {
		return ctrl.Result{}, err
	}

	reason, msg := ReasonActive, ""
	switch {
	case !now.Before(expires):
		reason, msg = ReasonExpired, fmt.Sprintf("expired at %s", expires.UTC().Format(time.RFC3339))
	case tok.Status.Registrations >= tok.Spec.MaxRegistrations:
		reason, msg = ReasonUsedUp, fmt.Sprintf("used up: %d of %d registrations", tok.Status.Registrations, tok.Spec.MaxRegistrations)
	case t.Management.URL == "":
		t.setReady(tok, metav1.ConditionFalse, ReasonManagementURLUnset,
			"the manager was started without --management-url, so agents would not know where to connect")
		return ctrl.Result{}, nil
	}
	if reason != ReasonActive {
		return t.retire(ctx, tok, id, pending, nextDeadline, reason, msg)
	}

	id.rules = registrationRules(true, pending)
	if err := id.ensure(ctx, t.Client); err != nil {
		t.setReady(tok, metav1.ConditionFalse, ReasonIdentityFailed, err.Error())
		return ctrl.Result{}, err
	}
	if err := t.ensureSecret(ctx, tok, expires); err != nil {
		t.setReady(tok, metav1.ConditionFalse, ReasonIdentityFailed, err.Error())
		return ctrl.Result{}, err
	}
	tok.Status.SecretName = id.name
	t.setReady(tok, metav1.ConditionTrue, ReasonActive, fmt.Sprintf("%d of %d registrations used; usable until %s",
		tok.Status.Registrations, tok.Spec.MaxRegistrations, expires.UTC().Format(time.RFC3339)))
	return ctrl.Result{RequeueAfter: expires.Sub(now) + time.Second}, nil
}

// retire takes away the right to register. While registered clusters have
// not picked up their first credential, the identity stays with read access
// to those Secrets only; then it is deleted with the token's Secret.
func (t *Tokens) retire(ctx context.Context, tok *fleeetv1.RegistrationToken, id identity, pending []string, nextDeadline time.Time, reason, msg string) (ctrl.Result, error) {
	tok.Status.SecretName = ""
	if len(pending) > 0 {
		id.rules = registrationRules(false, pending)
		if err := id.ensure(ctx, t.Client); err != nil {
			return ctrl.Result{}, err
		}
		if err := client.IgnoreNotFound(t.Client.Delete(ctx, t.secret(tok))); err != nil {
			return ctrl.Result{}, err
		}
		t.setReady(tok, metav1.ConditionFalse, reason, fmt.Sprintf("%s; waiting for %d registered cluster(s) to pick up their credential", msg, len(pending)))
		return ctrl.Result{RequeueAfter: time.Until(nextDeadline) + time.Second}, nil
	}
	var sa corev1.ServiceAccount
	existed := t.Client.Get(ctx, client.ObjectKey{Namespace: tok.Namespace, Name: id.name}, &sa) == nil
	if err := id.remove(ctx, t.Client, t.secret(tok)); err != nil {
		return ctrl.Result{}, err
	}
	if existed {
		t.Recorder.Eventf(tok, nil, corev1.EventTypeNormal, ReasonRetired, "Retire",
			"Deleted registration identity %s: %s", id.name, msg)
	}
	t.setReady(tok, metav1.ConditionFalse, reason, msg+"; the registration identity is deleted")
	return ctrl.Result{}, nil
}

// pendingDeliveries lists the first-credential Secrets of registered
// Remotes whose agent has not connected yet, and when the earliest of them
// stops being offered.
func (t *Tokens) pendingDeliveries(ctx context.Context, tok *fleeetv1.RegistrationToken, now time.Time) ([]string, time.Time, error) {
	var names []string
	var next time.Time
	for _, reg := range tok.Status.Registered {
		deadline := reg.Time.Add(enrol.DeliveryDeadline)
		if !now.Before(deadline) {
			continue
		}
		key := client.ObjectKey{Namespace: tok.Namespace, Name: reg.Name}
		remote := &fleeetv1.Remote{}
		switch err := t.Client.Get(ctx, key, remote); {
		case apierrors.IsNotFound(err):
			// Admission records a registration before the Remote is stored,
			// and the cache sees it later still.
			if now.Sub(reg.Time.Time) > storeWait {
				continue // never stored, or deleted since
			}
			deadline = reg.Time.Add(storeWait)
		case err != nil:
			return nil, next, err
		case remote.UID != reg.UID:
			continue // deleted, and the name taken again
		default:
			if connected, err := agentConnected(ctx, t.Client, key); err != nil {
				return nil, next, err
			} else if connected {
				continue
			}
		}
		names = append(names, enrol.RemoteIdentityName(reg.Name))
		if next.IsZero() || deadline.Before(next) {
			next = deadline
		}
	}
	return names, next, nil
}

// ensureSecret writes the token's Secret: a bearer token for the
// registration identity, bound to the Secret itself and living until the
// token expires, and the agent chart values around it.
func (t *Tokens) ensureSecret(ctx context.Context, tok *fleeetv1.RegistrationToken, expires time.Time) error {
	secret := t.secret(tok)
	err := t.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret)
	switch {
	case apierrors.IsNotFound(err):
		secret.Labels = map[string]string{fleeetv1.RegistrationTokenLabel: tok.Name}
		secret.Type = corev1.SecretTypeOpaque
		if err := controllerutil.SetControllerReference(tok, secret, t.Client.Scheme()); err != nil {
			return err
		}
		if err := t.Client.Create(ctx, secret); err != nil {
			return fmt.Errorf("creating Secret %s: %w", secret.Name, err)
		}
	case err != nil:
		return err
	case !metav1.IsControlledBy(secret, tok):
		return fmt.Errorf("secret %s exists and was not created for this token", secret.Name)
	}
	if current, err := enrol.TokenFromSecret(secret); err == nil && !current.ExpiresAt.Before(expires.Add(-time.Minute)) {
		return nil
	}
	token, err := enrol.Mint(ctx, t.Client, tok.Namespace, enrol.RegistrationName(tok.Name), time.Until(expires), secret)
	if err != nil {
		return err
	}
	mgmt := t.Management
	mgmt.Namespace = tok.Namespace
	values, err := enrol.AgentValues{Token: token.Value, Management: mgmt}.YAML()
	if err != nil {
		return err
	}
	secret.Data = token.SecretData()
	secret.Data[enrol.ValuesKey] = values
	if err := t.Client.Update(ctx, secret); err != nil {
		return fmt.Errorf("writing Secret %s: %w", secret.Name, err)
	}
	return nil
}

func (t *Tokens) secret(tok *fleeetv1.RegistrationToken) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tok.Namespace, Name: enrol.RegistrationName(tok.Name)}}
}

func (t *Tokens) setReady(tok *fleeetv1.RegistrationToken, cs metav1.ConditionStatus, reason, msg string) {
	status.SetCondition(&tok.Status.Conditions, tok.Generation, fleeetv1.ReadyCondition, cs, reason, msg)
	stalled := metav1.ConditionFalse
	if reason == ReasonManagementURLUnset || reason == ReasonIdentityFailed {
		stalled = metav1.ConditionTrue
	}
	status.SetCondition(&tok.Status.Conditions, tok.Generation, fleeetv1.StalledCondition, stalled, reason, msg)
	status.SetCondition(&tok.Status.Conditions, tok.Generation, fleeetv1.ReconcilingCondition, metav1.ConditionFalse, reason, msg)
}

// ExpiresAt is when a token stops admitting registrations.
func ExpiresAt(tok *fleeetv1.RegistrationToken) time.Time {
	ttl := DefaultTTL
	if tok.Spec.TTL != nil {
		ttl = tok.Spec.TTL.Duration
	}
	return tok.CreationTimestamp.Add(ttl)
}

// registrationRules are a RegistrationToken's rights: while it is usable,
// create Remotes (the admission webhook admits one per remaining
// registration); and read the first-credential Secrets of the Remotes
// registered and not yet connected.
func registrationRules(mayRegister bool, credentialSecrets []string) []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	if mayRegister {
		rules = append(rules, rbacv1.PolicyRule{
			APIGroups: []string{fleeetv1.GroupVersion.Group}, Resources: []string{"remotes"}, Verbs: []string{"create"},
		})
	}
	// An empty resourceNames would mean every Secret.
	if len(credentialSecrets) > 0 {
		rules = append(rules, rbacv1.PolicyRule{
			APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: credentialSecrets, Verbs: []string{"get"},
		})
	}
	return rules
}
