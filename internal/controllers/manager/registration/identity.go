// Package registration holds the manager's side of pull registration: the
// RegistrationToken controller, which keeps a registration identity alive
// while its token may be used, and the Remote identity controller, which
// gives each registered cluster an identity of its own.
package registration

import (
	"context"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// identity is a ServiceAccount with one Role bound to it, all three named
// alike and controlled by owner.
type identity struct {
	owner  client.Object
	name   string
	labels map[string]string
	rules  []rbacv1.PolicyRule
}

// ensure creates or updates the ServiceAccount, Role and RoleBinding. It
// refuses to adopt a ServiceAccount someone else created under the name,
// since tokens of that account would then carry the identity's rights.
// Reads go through c's cache; an object the cache has not seen yet although
// the apiserver holds it (AlreadyExists) is read again through live, so a
// lagging cache does not hold a registration back under the controller's
// error backoff. A nil live leaves the error to the next reconcile.
func (id identity) ensure(ctx context.Context, c client.Client, live client.Reader) error {
	// fresh empties the object mutate works on before each try, so nothing
	// the first try set survives into what the second one reads.
	createOrUpdate := func(fresh func() client.Object, mutate controllerutil.MutateFn) error {
		_, err := controllerutil.CreateOrUpdate(ctx, c, fresh(), mutate)
		if apierrors.IsAlreadyExists(err) && live != nil {
			_, err = controllerutil.CreateOrUpdate(ctx, liveReads{Client: c, live: live}, fresh(), mutate)
		}
		return err
	}
	ns := id.owner.GetNamespace()
	meta := func() metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: id.name} }
	sa := &corev1.ServiceAccount{}
	if err := createOrUpdate(func() client.Object { *sa = corev1.ServiceAccount{ObjectMeta: meta()}; return sa }, func() error {
		if sa.CreationTimestamp.IsZero() {
			sa.Labels = id.labels
			return controllerutil.SetControllerReference(id.owner, sa, c.Scheme())
		}
		if !metav1.IsControlledBy(sa, id.owner) {
			return fmt.Errorf("ServiceAccount %s/%s exists and was not created for %s; delete it or rename the owner",
				ns, id.name, id.owner.GetName())
		}
		return nil
	}); err != nil {
		return err
	}
	role := &rbacv1.Role{}
	if err := createOrUpdate(func() client.Object { *role = rbacv1.Role{ObjectMeta: meta()}; return role }, func() error {
		role.Labels = id.labels
		role.Rules = id.rules
		return controllerutil.SetControllerReference(id.owner, role, c.Scheme())
	}); err != nil {
		return fmt.Errorf("writing Role %s/%s: %w", ns, id.name, err)
	}
	binding := &rbacv1.RoleBinding{}
	if err := createOrUpdate(func() client.Object { *binding = rbacv1.RoleBinding{ObjectMeta: meta()}; return binding }, func() error {
		binding.Labels = id.labels
		binding.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: id.name}
		binding.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: id.name}}
		return controllerutil.SetControllerReference(id.owner, binding, c.Scheme())
	}); err != nil {
		return fmt.Errorf("writing RoleBinding %s/%s: %w", ns, id.name, err)
	}
	return nil
}

// create creates obj. When the apiserver already holds it although the
// cache said it did not, obj becomes what the apiserver holds, read through
// live, for the caller to judge as if the cache had had it; nothing the
// caller set on obj survives that read. A nil live leaves the AlreadyExists
// error to the next reconcile.
func create(ctx context.Context, c client.Client, live client.Reader, obj client.Object) error {
	err := c.Create(ctx, obj)
	if !apierrors.IsAlreadyExists(err) || live == nil {
		return err
	}
	held := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
	if err := live.Get(ctx, client.ObjectKeyFromObject(obj), held); err != nil {
		return err
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(held).Elem())
	return nil
}

// liveReads is a client whose Get reads from the apiserver.
type liveReads struct {
	client.Client
	live client.Reader
}

func (l liveReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return l.live.Get(ctx, key, obj, opts...)
}

// remove deletes the ServiceAccount first, which invalidates every token
// minted for it at once, then its Role and RoleBinding and any extra
// objects. Objects already gone, or not controlled by the owner, are skipped.
// They are read through live when it is set: a cache that has not seen the
// ServiceAccount yet must not let a revoked cluster's tokens live on.
func (id identity) remove(ctx context.Context, c client.Client, live client.Reader, extra ...client.Object) error {
	var reader client.Reader = c
	if live != nil {
		reader = live
	}
	ns := id.owner.GetNamespace()
	meta := metav1.ObjectMeta{Namespace: ns, Name: id.name}
	objs := append([]client.Object{
		&corev1.ServiceAccount{ObjectMeta: meta}, &rbacv1.RoleBinding{ObjectMeta: meta}, &rbacv1.Role{ObjectMeta: meta},
	}, extra...)
	var errs []error
	for _, obj := range objs {
		if err := reader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		if !metav1.IsControlledBy(obj, id.owner) {
			continue
		}
		uid := obj.GetUID()
		if err := c.Delete(ctx, obj, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err))
		}
	}
	return kerrors.NewAggregate(errs)
}

// RemoteRules are a pull cluster's rights: read its own Remote, the
// ProxyAssemblages its plan may be split over and its delivery bundle, write
// their status, renew its Lease, mint tokens for itself and get the
// CompiledSyncs and CompiledPlans its plan names. Every rule but the last is
// limited by name;
// list and watch by name work through a metadata.name field selector. The
// bundle is the only Secret it may read: every other Secret of the
// namespace, other clusters' bundles included, stays out of its reach.
//
// CompiledSyncs and CompiledPlans cannot be limited by name: the plan names
// new ones with every version, and a Role rewritten for each would lag the
// plan. They need not be: a CompiledSync's name is a hash keyed with its
// Module's UID, which the cluster cannot read, and a CompiledPlan's a hash
// of the CompiledSync names it holds, so it can get only those its own plan
// names, and with get alone (never list or watch) it cannot learn any
// other's name.
func RemoteRules(remote string) []rbacv1.PolicyRule {
	names, parts := []string{remote}, fleeetv1.PlanPartNames(remote)
	return []rbacv1.PolicyRule{
		{APIGroups: []string{fleeetv1.GroupVersion.Group}, Resources: []string{"remotes"},
			ResourceNames: names, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{fleeetv1.GroupVersion.Group}, Resources: []string{"proxyassemblages"},
			ResourceNames: parts, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{fleeetv1.GroupVersion.Group}, Resources: []string{"remotes/status"},
			ResourceNames: names, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{fleeetv1.GroupVersion.Group}, Resources: []string{"proxyassemblages/status"},
			ResourceNames: parts, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"},
			ResourceNames: []string{fleeetv1.DeliveryBundleName(remote)}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			ResourceNames: names, Verbs: []string{"get", "update"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"},
			ResourceNames: []string{fleeetv1.RemoteIdentityName(remote)}, Verbs: []string{"create"}},
		{APIGroups: []string{fleeetv1.GroupVersion.Group}, Resources: []string{"compiledsyncs", "compiledplans"},
			Verbs: []string{"get"}},
	}
}
