package registration

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/finalizer"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/status"
)

// TokenReconciler records each RegistrationToken's registrations and keeps its
// registration identity and Secret until the token expires; then, once
// every registered cluster has picked up its first credential, it deletes
// the identity, which kills its bearer token.
//
// Registrations are recorded here, from the Remotes the apiserver stored,
// not in admission: the webhook only judges, so nothing that reaches it
// without the apiserver can use up a registration. A Remote counts for the
// token named by its fleeet.dev/registration-token label, which admission
// lets only that token's identity set. The token records such Remotes in
// creation order, only those created before it expired and at most
// maxRegistrations, and never removes an entry; a Remote it cannot record
// is refused and deleted by the Remote controller.
//
// A used-up token keeps its identity until it expires: the identity can
// then still only create Remotes, and admission refuses every one saying
// the token is used up, where a deleted identity would leave a late agent
// with an unexplained authentication failure.
type TokenReconciler struct {
	// Client reads from the cache and writes identities, Secrets and status.
	Client client.Client
	// APIReader reads identity objects uncached where a lagging cache would
	// hold a registration back or leave a revoked identity behind; nil
	// reads through Client only.
	APIReader client.Reader
	// Recorder records identity retirements on tokens.
	Recorder events.EventRecorder
	// Management is the API URL and CA bundle written into agent values;
	// the namespace is each token's own.
	Management credential.Management
	// AgentChart is the fleet-agent chart the fleet was released with, as
	// helm install takes it, written into each token's Secret for fleetctl
	// to print; empty writes none.
	AgentChart string
	// Concurrent is how many tokens reconcile at once.
	Concurrent int
}

// SetupWithManager registers the controller. Every object the controller
// writes for a token, and every Remote created through it, carries the
// token's label, so one map function brings their changes back.
func (t *TokenReconciler) SetupWithManager(mgr ctrl.Manager) error {
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
		// A Remote's label cannot change, so only its creation and
		// deletion matter here.
		Watches(&fleeetv1.Remote{}, byLabel, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		Watches(&corev1.Secret{}, byLabel).
		Watches(&corev1.ServiceAccount{}, byLabel).
		Watches(&coordinationv1.Lease{}, byLabel).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, t.Concurrent)}).
		Complete(t)
}

// Reconcile records one token's new registrations, then brings its identity
// and Secret in line with whether the token may still be used. The token is
// Ready (ReasonActive) while it may be used; Failed, not Stalled, once used
// up (ReasonUsedUp) or expired (retire), as that is its end and no fault;
// Stalled without a management URL (ReasonManagementURLUnset) or when its
// identity or Secret cannot be written (ReasonIdentityFailed).
func (t *TokenReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	tok := &fleeetv1.RegistrationToken{}
	if err := t.Client.Get(ctx, req.NamespacedName, tok); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	id := identity{owner: tok, name: fleeetv1.RegistrationIdentityName(tok.Name),
		labels: map[string]string{fleeetv1.RegistrationTokenLabel: tok.Name}}
	if !tok.DeletionTimestamp.IsZero() {
		if err := id.remove(ctx, t.Client, t.APIReader, t.secret(tok)); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, finalizer.Release(ctx, t.Client, tok, fleeetv1.RegistrationTokenFinalizer)
	}
	if err := finalizer.Add(ctx, t.Client, tok, fleeetv1.RegistrationTokenFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	now := time.Now()
	expires := tok.ExpiresAt()
	if err := t.recordRegistrations(ctx, tok, now); err != nil {
		return ctrl.Result{}, err
	}

	defer status.NewPatcher(t.Client, t.Recorder, tok).Finish(ctx, &retErr)
	tok.Status.ExpiresAt = &metav1.Time{Time: expires}
	tok.Status.Registrations = int32(len(tok.Status.Registered))
	pending, nextDeadline, err := t.pendingDeliveries(ctx, tok, now)
	if err != nil {
		return ctrl.Result{}, err
	}

	switch {
	case !now.Before(expires):
		return t.retire(ctx, tok, id, pending, nextDeadline, fleeetv1.ReasonExpired,
			fmt.Sprintf("expired at %s", expires.UTC().Format(time.RFC3339)))
	case t.Management.URL == "":
		status.MarkStalled(tok, fleeetv1.ReasonManagementURLUnset,
			"the manager was started without --management-url, so agents would not know where to connect")
		return ctrl.Result{}, nil
	}

	id.rules = registrationRules(true, pending)
	if err := id.ensure(ctx, t.Client, t.APIReader); err != nil {
		status.MarkStalled(tok, fleeetv1.ReasonIdentityFailed, err.Error())
		return ctrl.Result{}, err
	}
	if err := t.ensureSecret(ctx, tok, expires); err != nil {
		status.MarkStalled(tok, fleeetv1.ReasonIdentityFailed, err.Error())
		return ctrl.Result{}, err
	}
	tok.Status.SecretName = id.name
	if tok.Status.Registrations >= tok.Spec.MaxRegistrations {
		status.MarkFailed(tok, fleeetv1.ReasonUsedUp, fmt.Sprintf(
			"used up: %d of %d registrations; the registration identity stays until %s to tell late agents so, then is deleted",
			tok.Status.Registrations, tok.Spec.MaxRegistrations, expires.UTC().Format(time.RFC3339)))
	} else {
		status.MarkReady(tok, fleeetv1.ReasonActive, fmt.Sprintf("%d of %d registrations used; usable until %s",
			tok.Status.Registrations, tok.Spec.MaxRegistrations, expires.UTC().Format(time.RFC3339)))
	}
	return ctrl.Result{RequeueAfter: expires.Sub(now) + time.Second}, nil
}

// recordRegistrations appends to status.registered the Remotes created
// through the token that it may still record: in creation order (then by
// name, as timestamps have one-second precision), created before the token
// expired, up to maxRegistrations. The status is written at once with the
// resourceVersion read, so a token read stale from the cache conflicts
// instead of recording over registrations it has not seen.
func (t *TokenReconciler) recordRegistrations(ctx context.Context, tok *fleeetv1.RegistrationToken, now time.Time) error {
	room := int(tok.Spec.MaxRegistrations) - len(tok.Status.Registered)
	if room <= 0 {
		return nil
	}
	remotes := &fleeetv1.RemoteList{}
	if err := t.Client.List(ctx, remotes, client.InNamespace(tok.Namespace),
		client.MatchingLabels{fleeetv1.RegistrationTokenLabel: tok.Name}); err != nil {
		return fmt.Errorf("listing the Remotes of RegistrationToken %s: %w", tok.Name, err)
	}
	recorded := map[types.UID]bool{}
	for _, reg := range tok.Status.Registered {
		recorded[reg.UID] = true
	}
	var candidates []*fleeetv1.Remote
	for i := range remotes.Items {
		r := &remotes.Items[i]
		if !recorded[r.UID] && r.DeletionTimestamp.IsZero() && createdInTime(tok, r) {
			candidates = append(candidates, r)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	slices.SortFunc(candidates, func(a, b *fleeetv1.Remote) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	candidates = candidates[:min(room, len(candidates))]
	for _, r := range candidates {
		tok.Status.Registered = append(tok.Status.Registered, fleeetv1.Registration{Name: r.Name, UID: r.UID, Time: metav1.NewTime(now)})
	}
	tok.Status.Registrations = int32(len(tok.Status.Registered))
	if err := t.Client.Status().Update(ctx, tok); err != nil {
		return fmt.Errorf("recording registrations: %w", err)
	}
	for _, r := range candidates {
		t.Recorder.Eventf(tok, r, corev1.EventTypeNormal, fleeetv1.ReasonRegistrationRecorded, "Register",
			"Recorded the registration of Remote %s (%d of %d)", r.Name, tok.Status.Registrations, tok.Spec.MaxRegistrations)
	}
	return nil
}

// retire takes away the right to register. While registered clusters have
// not picked up their first credential, the identity stays with read access
// to those Secrets only; then it is deleted with the token's Secret. The
// token is Failed with reason either way.
func (t *TokenReconciler) retire(ctx context.Context, tok *fleeetv1.RegistrationToken, id identity, pending []string, nextDeadline time.Time, reason, msg string) (ctrl.Result, error) {
	tok.Status.SecretName = ""
	if len(pending) > 0 {
		id.rules = registrationRules(false, pending)
		if err := id.ensure(ctx, t.Client, t.APIReader); err != nil {
			return ctrl.Result{}, err
		}
		if err := client.IgnoreNotFound(t.Client.Delete(ctx, t.secret(tok))); err != nil {
			return ctrl.Result{}, err
		}
		status.MarkFailed(tok, reason, fmt.Sprintf("%s; waiting for %d registered cluster(s) to pick up their credential", msg, len(pending)))
		return ctrl.Result{RequeueAfter: time.Until(nextDeadline) + time.Second}, nil
	}
	var sa corev1.ServiceAccount
	existed := t.Client.Get(ctx, client.ObjectKey{Namespace: tok.Namespace, Name: id.name}, &sa) == nil
	if err := id.remove(ctx, t.Client, t.APIReader, t.secret(tok)); err != nil {
		return ctrl.Result{}, err
	}
	if existed {
		t.Recorder.Eventf(tok, nil, corev1.EventTypeNormal, fleeetv1.ReasonRetired, "Retire",
			"Deleted registration identity %s: %s", id.name, msg)
	}
	status.MarkFailed(tok, reason, msg+"; the registration identity is deleted")
	return ctrl.Result{}, nil
}

// pendingDeliveries lists the first-credential Secrets of registered
// Remotes whose agent has not connected yet, and when the earliest of them
// stops being offered.
func (t *TokenReconciler) pendingDeliveries(ctx context.Context, tok *fleeetv1.RegistrationToken, now time.Time) ([]string, time.Time, error) {
	var names []string
	var next time.Time
	for _, reg := range tok.Status.Registered {
		deadline := reg.Time.Add(credential.DeliveryDeadline)
		if !now.Before(deadline) {
			continue
		}
		key := client.ObjectKey{Namespace: tok.Namespace, Name: reg.Name}
		remote := &fleeetv1.Remote{}
		switch err := t.Client.Get(ctx, key, remote); {
		case apierrors.IsNotFound(err):
			continue // deleted since
		case err != nil:
			return nil, next, err
		case remote.UID != reg.UID:
			continue // deleted, and the name taken again
		default:
			if connected, err := agentConnected(ctx, t.Client, remote); err != nil {
				return nil, next, err
			} else if connected {
				continue
			}
		}
		names = append(names, fleeetv1.RemoteIdentityName(reg.Name))
		if next.IsZero() || deadline.Before(next) {
			next = deadline
		}
	}
	return names, next, nil
}

// ensureSecret writes the token's Secret: a bearer token for the
// registration identity, bound to the Secret itself and living until the
// token expires, and the agent chart values around it.
func (t *TokenReconciler) ensureSecret(ctx context.Context, tok *fleeetv1.RegistrationToken, expires time.Time) error {
	secret := t.secret(tok)
	err := secrets.GetOwned(ctx, t.Client, t.APIReader, tok, client.ObjectKeyFromObject(secret), secret)
	switch {
	case apierrors.IsNotFound(err):
		secret.Labels = secrets.Labels(map[string]string{fleeetv1.RegistrationTokenLabel: tok.Name})
		secret.Type = corev1.SecretTypeOpaque
		if err := controllerutil.SetControllerReference(tok, secret, t.Client.Scheme()); err != nil {
			return err
		}
		// A Secret the cache had not seen comes back as the apiserver
		// holds it, and is judged below like any other.
		if err := create(ctx, t.Client, t.APIReader, secret); err != nil {
			return fmt.Errorf("creating Secret %s: %w", secret.Name, err)
		}
	case err != nil:
		return err
	}
	if !metav1.IsControlledBy(secret, tok) {
		return fmt.Errorf("secret %s exists and was not created for this token", secret.Name)
	}
	if current, err := credential.TokenFromSecret(secret); err == nil && !current.ExpiresAt.Before(expires.Add(-time.Minute)) {
		return nil
	}
	token, err := credential.Mint(ctx, t.Client, tok.Namespace, fleeetv1.RegistrationIdentityName(tok.Name), time.Until(expires), secret)
	if err != nil {
		return err
	}
	mgmt := t.Management
	mgmt.Namespace = tok.Namespace
	agent := credential.AgentValues{Token: token.Value, Management: mgmt}
	values, err := agent.YAML()
	if err != nil {
		return err
	}
	enrolment, err := agent.Enrolment()
	if err != nil {
		return err
	}
	secret.Data = token.SecretData()
	secret.Data[credential.ValuesKey] = values
	secret.Data[credential.EnrolmentKey] = []byte(enrolment)
	if t.AgentChart != "" {
		secret.Data[credential.ChartKey] = []byte(t.AgentChart)
	}
	if err := t.Client.Update(ctx, secret); err != nil {
		return fmt.Errorf("writing Secret %s: %w", secret.Name, err)
	}
	return nil
}

func (t *TokenReconciler) secret(tok *fleeetv1.RegistrationToken) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tok.Namespace, Name: fleeetv1.RegistrationIdentityName(tok.Name)}}
}

// createdInTime tells whether a Remote was created before its token expired.
func createdInTime(tok *fleeetv1.RegistrationToken, remote *fleeetv1.Remote) bool {
	return remote.CreationTimestamp.Time.Before(tok.ExpiresAt())
}

// refusal says why the token will never record a Remote created through
// it, or is empty while it still may. A token's record is final once it
// holds maxRegistrations entries, since entries are never removed, so a
// stale read of a full token decides as well as a fresh one.
func refusal(tok *fleeetv1.RegistrationToken, remote *fleeetv1.Remote) string {
	switch used, limit := len(tok.Status.Registered), int(tok.Spec.MaxRegistrations); {
	case !createdInTime(tok, remote):
		return fmt.Sprintf("created after RegistrationToken %s expired at %s", tok.Name, tok.ExpiresAt().UTC().Format(time.RFC3339))
	case used >= limit:
		return fmt.Sprintf("RegistrationToken %s is used up: %d of %d registrations", tok.Name, used, limit)
	}
	return ""
}

// registrationRules are a RegistrationToken's rights: until it expires,
// create Remotes (admission refuses them once the token is used up, saying
// so); and read the first-credential Secrets of the Remotes registered and
// not yet connected.
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
