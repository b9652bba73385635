package remote

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/delivery"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/shard"
)

// deliveredSecretsIndex indexes ProxyAssemblages by the Secrets their syncs
// deliver, so a Secret's change rewrites only the bundles that hold it.
const deliveredSecretsIndex = "spec.assemblage.syncs.secrets.name"

// DeliveryReconciler writes, for every pull Remote whose plan delivers
// Secrets (spec.sync.secrets), the bundle Secret in the Remote's namespace
// that holds them all, named fleeetv1.DeliveryBundleName and readable by
// that Remote's identity alone. The bundle follows the plan the Remote
// holds, not the Modules: during a rollout it delivers what the older
// version still needs too. Push Remotes get none; the push controller
// writes their Secrets downstream itself.
type DeliveryReconciler struct {
	// Shard says which Remotes this replica reconciles; nil for all of
	// them, on the leader alone.
	Shard *shard.Members
	// Client reads Remotes, plans and Secrets from the cache and writes
	// bundles.
	Client client.Client
	// live reads a bundle written before the manager labelled its Secrets
	// (secrets.GetOwned): the manager's API reader.
	live client.Reader
	// Recorder records, on the Remote and the Modules concerned, why a
	// Secret is not delivered or the bundle not written.
	Recorder events.EventRecorder
	// Concurrent is how many Remotes reconcile at once.
	Concurrent int
}

// SetupWithManager registers the controller and its index.
func (d *DeliveryReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	d.live = mgr.GetAPIReader()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &fleeetv1.ProxyAssemblage{}, deliveredSecretsIndex, func(o client.Object) []string {
		return delivery.Names(o.(*fleeetv1.ProxyAssemblage).Spec.Assemblage.Syncs)
	}); err != nil {
		return err
	}
	return d.Shard.Complete(ctrl.NewControllerManagedBy(mgr).
		Named("delivery").
		// A Remote turning push or pull, or its cluster's first heartbeat.
		For(&fleeetv1.Remote{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, firstHeartbeat))).
		// Any part of its plan.
		Watches(&fleeetv1.ProxyAssemblage{}, planOfPart, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A delivered Secret's rotation or relabelling, and a bundle
		// changed by someone else: whole Secrets, which the cache holds of
		// these alone (package secrets).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(d.plansDelivering)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &fleeetv1.Remote{}, handler.OnlyControllerOwner())),
		d.Concurrent, d)
}

// firstHeartbeat passes the update that records a Remote's first
// heartbeat: the moment a cluster is known to be behind it.
var firstHeartbeat = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, oldOK := e.ObjectOld.(*fleeetv1.Remote)
	remote, ok := e.ObjectNew.(*fleeetv1.Remote)
	return oldOK && ok && old.Status.LastHeartbeatTime == nil && remote.Status.LastHeartbeatTime != nil
}}

// plansDelivering maps a Secret to the Remotes a part of whose plan
// delivers it.
func (d *DeliveryReconciler) plansDelivering(ctx context.Context, o client.Object) []reconcile.Request {
	pas := &fleeetv1.ProxyAssemblageList{}
	if err := d.Client.List(ctx, pas, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy,
		client.MatchingFields{deliveredSecretsIndex: o.GetName()}); err != nil {
		return nil
	}
	seen := map[string]bool{}
	var reqs []reconcile.Request
	for i := range pas.Items {
		if name, _ := fleeetv1.PlanOfPart(pas.Items[i].Name); !seen[name] {
			seen[name] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}})
		}
	}
	return reqs
}

// Reconcile writes one Remote's bundle from the plan it holds, every part
// of it: while a sync moves between parts, the bundle delivers its Secrets
// from either. A Secret
// that is missing or may not be delivered (delivery.Check) is left out and
// reported on the Remote and on the Modules whose syncs name it; a bundle
// that would not fit in a Secret is not written at all and reported alike.
// A bundle is created only once the plan delivers something and a cluster
// has reported through the Remote, and kept, empty, once it was.
func (d *DeliveryReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	remote := &fleeetv1.Remote{}
	if err := d.Client.Get(ctx, req.NamespacedName, remote); err != nil {
		// The bundle is the Remote's and goes with it.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if remote.Spec.KubeconfigRef != nil || !remote.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if remote.Status.LastHeartbeatTime == nil {
		// No cluster has reported through this Remote yet, and a tenant
		// can create pull Remotes with none behind them: a copy of every
		// delivered Secret for each would let one tenant fill the
		// management cluster's storage. The first heartbeat brings it here.
		return ctrl.Result{}, nil
	}
	plan, err := compile.ReadPlan(ctx, d.Client, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	syncs := plan.Syncs()
	items, err := collectDeliveries(ctx, d.Client, d.Recorder, remote, syncs)
	if err != nil {
		return ctrl.Result{}, err
	}
	data, err := delivery.Encode(items)
	if err != nil {
		reportDelivery(ctx, d.Client, d.Recorder, remote, syncs, slices.Collect(maps.Keys(items)), fleeetv1.ReasonDeliveryTooLarge, err.Error())
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, d.write(ctx, remote, data)
}

// collectDeliveries reads from c, the manager's cache, the Secrets syncs
// deliver to remote (delivery.Read), leaving out, and reporting through
// rec, those that are missing or may not be delivered.
func collectDeliveries(ctx context.Context, c client.Reader, rec events.EventRecorder, remote *fleeetv1.Remote, syncs []fleeetv1.NamedSync) (map[string]delivery.Item, error) {
	names := delivery.Names(syncs)
	if len(names) == 0 {
		return nil, nil
	}
	kubeconfigs, err := kubeconfigSecrets(ctx, c, remote.Namespace)
	if err != nil {
		return nil, err
	}
	items := map[string]delivery.Item{}
	var refused, why []string
	for _, name := range names {
		secret, err := delivery.Read(ctx, c, client.ObjectKey{Namespace: remote.Namespace, Name: name})
		switch {
		case apierrors.IsNotFound(err):
			err = fmt.Errorf("Secret %s does not exist in namespace %s", name, remote.Namespace)
		case err != nil:
			return nil, err
		default:
			err = delivery.Check(secret, kubeconfigs)
		}
		if err != nil {
			refused, why = append(refused, name), append(why, err.Error())
			continue
		}
		items[name] = delivery.ItemOf(secret)
	}
	if len(refused) > 0 {
		// One event: events of one reason about one object form a series
		// that keeps only the first message.
		reportDelivery(ctx, c, rec, remote, syncs, refused, fleeetv1.ReasonSecretNotDeliverable,
			strings.Join(why, "; ")+"; not delivered")
	}
	return items, nil
}

// kubeconfigSecrets are the names of the Secrets push Remotes of ns read
// their kubeconfigs from.
func kubeconfigSecrets(ctx context.Context, c client.Reader, ns string) (map[string]bool, error) {
	remotes := &fleeetv1.RemoteList{}
	if err := c.List(ctx, remotes, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for i := range remotes.Items {
		if ref := remotes.Items[i].Spec.KubeconfigRef; ref != nil {
			names[ref.Name] = true
		}
	}
	return names, nil
}

// write creates or updates the Remote's bundle to hold data. It never
// adopts a Secret of the bundle's name that the Remote does not control:
// the cluster could read what someone else put there.
func (d *DeliveryReconciler) write(ctx context.Context, remote *fleeetv1.Remote, data map[string][]byte) error {
	bundle := &corev1.Secret{}
	key := client.ObjectKey{Namespace: remote.Namespace, Name: fleeetv1.DeliveryBundleName(remote.Name)}
	err := secrets.GetOwned(ctx, d.Client, d.live, remote, key, bundle)
	switch {
	case apierrors.IsNotFound(err):
		if len(data) == 0 {
			return nil
		}
		bundle = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: secrets.Labels(nil)},
			Type: corev1.SecretTypeOpaque, Data: data}
		if err := controllerutil.SetControllerReference(remote, bundle, d.Client.Scheme()); err != nil {
			return err
		}
		err = d.Client.Create(ctx, bundle)
	case err != nil:
	case !metav1.IsControlledBy(bundle, remote):
		return fmt.Errorf("Secret %s exists and is not controlled by Remote %s; delete it so the Remote's deliveries can be written", key, remote.Name)
	case maps.EqualFunc(bundle.Data, data, slices.Equal):
		return nil
	default:
		bundle.Data = data
		err = d.Client.Update(ctx, bundle)
	}
	if err != nil {
		return fmt.Errorf("writing delivery bundle %s: %w", key, err)
	}
	log.FromContext(ctx).V(1).Info("Wrote delivery bundle", "secrets", slices.Sorted(maps.Keys(data)))
	return nil
}

// reportDelivery records why Secrets names are not delivered, or not
// delivered any more, on the Remote and on each Module whose sync in the
// plan names one. msg names Secrets only.
func reportDelivery(ctx context.Context, c client.Reader, rec events.EventRecorder, remote *fleeetv1.Remote, syncs []fleeetv1.NamedSync, names []string, reason, msg string) {
	log.FromContext(ctx).Info("Secrets not delivered", "secrets", names, "reason", reason)
	rec.Eventf(remote, nil, corev1.EventTypeWarning, reason, "Deliver", "%s", msg)
	for i := range syncs {
		if !slices.ContainsFunc(syncs[i].Secrets, func(s fleeetv1.SecretDelivery) bool { return slices.Contains(names, s.Name) }) {
			continue
		}
		m := &fleeetv1.Module{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: remote.Namespace, Name: syncs[i].Name}, m); err != nil {
			continue
		}
		rec.Eventf(m, remote, corev1.EventTypeWarning, reason, "Deliver", "Remote %s: %s", remote.Name, msg)
	}
}
