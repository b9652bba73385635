// Package inventory enrols the clusters an inventory lists as push Remotes:
// Cluster API Clusters, through the kubeconfig Secret Cluster API writes
// beside each, and sig-multicluster ClusterProfiles, through an access
// provider and a token Secret.
package inventory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/served"
)

// Values of the fleeet.dev/inventory label of an enrolled Remote.
const (
	ClusterAPI     = "ClusterAPI"
	ClusterProfile = "ClusterProfile"
)

// Event reasons on an inventory object the manager does not enrol.
const (
	// ReasonRemoteExists: a Remote of the object's name exists that was not
	// enrolled from it; it is left as it is.
	ReasonRemoteExists = "RemoteExists"
	// ReasonNoCredentials: a Cluster or ClusterProfile offers no access the
	// manager can use yet, or its Secret is not provably its credential.
	ReasonNoCredentials = "NoCredentials"
)

// inventoryKind is one kind of inventory object and how a cluster it lists
// is reached.
type inventoryKind struct {
	// name is the Remote's fleeet.dev/inventory label.
	name string
	gk   schema.GroupKind
	// kubeconfig returns the Secret of obj's namespace holding a kubeconfig
	// for obj's cluster, composing it first where the kind needs to.
	kubeconfig func(ctx context.Context, r *Reconciler, obj *unstructured.Unstructured) (*fleeetv1.SecretKeyReference, error)
}

var kinds = []inventoryKind{
	{name: ClusterAPI, gk: schema.GroupKind{Group: "cluster.x-k8s.io", Kind: "Cluster"}, kubeconfig: clusterAPIKubeconfig},
	{name: ClusterProfile, gk: schema.GroupKind{Group: "multicluster.x-k8s.io", Kind: "ClusterProfile"}, kubeconfig: profileKubeconfig},
}

// Reconciler keeps one push Remote for each inventory object of a tenant
// namespace: same name, labels copied (bar fleeet.dev/ ones), owned by the
// object. When the object goes, the Remote is deleted; deleting a push
// Remote leaves its cluster's Assemblage and workloads as they are.
type Reconciler struct {
	// Client reads the inventory objects and writes Remotes.
	Client client.Client
	// Recorder records why an object is not enrolled.
	Recorder events.EventRecorder
	// Concurrent is how many objects reconcile at once.
	Concurrent int
	// ServiceAccountName is the Remotes' spec.serviceAccountName when the
	// inventory object has no fleeet.dev/service-account-name annotation.
	ServiceAccountName string
	// AccessProvider names the ClusterProfile access provider whose cluster
	// (server and CA) the manager uses, with the token of the Secret named
	// after the profile in its namespace, key token, as the secretreader
	// credential plugin reads it; the Secret must be labelled
	// fleeet.dev/cluster-profile=<profile>.
	AccessProvider string
	// Poll is how often the manager asks whether an inventory kind it does
	// not serve yet is served; inventoryPoll when zero.
	Poll time.Duration

	// live reads the Secrets that hold clusters' credentials, which the
	// manager's cache holds by their metadata alone (package secrets): the
	// manager's API reader.
	live client.Reader
	// clusterAPISecrets remembers what each Cluster API kubeconfig Secret
	// was found to be at the version read, so it is read again only once
	// it changed.
	clusterAPISecrets secrets.Verdicts
}

// inventoryPoll is how often the manager asks, by default, whether an
// inventory kind it does not serve yet is served. Most management clusters
// never install one, so the manager asks for good: each ask costs the
// apiserver a discovery request or two (the REST mapper reloading the
// group list), a few a minute.
const inventoryPoll = time.Minute

// SetupWithManager starts a controller for each inventory kind the
// apiserver serves, and for one whose CRD is absent once it is installed
// (asked every Poll): the manager runs without them and needs no restart
// to see them come.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.live = mgr.GetAPIReader()
	poll := cmp.Or(r.Poll, inventoryPoll)
	for _, k := range kinds {
		// An inventory installed after the manager started is enrolled
		// from once it is served, without a restart (package served).
		missing := func() ([]string, error) {
			_, err := mgr.GetRESTMapper().RESTMapping(k.gk)
			if apimeta.IsNoMatchError(err) {
				return []string{k.gk.String()}, nil
			}
			if err != nil {
				return nil, fmt.Errorf("looking up inventory kind %s: %w", k.gk, err)
			}
			return nil, nil
		}
		if err := served.When(mgr, "inventory "+k.gk.String(), poll, missing, func() error { return r.setupKind(mgr, k) }); err != nil {
			return err
		}
	}
	return nil
}

// setupKind registers the controller enrolling from inventory kind k,
// which the cluster serves.
func (r *Reconciler) setupKind(mgr ctrl.Manager, k inventoryKind) error {
	mapping, err := mgr.GetRESTMapper().RESTMapping(k.gk)
	if err != nil {
		return fmt.Errorf("looking up inventory kind %s: %w", k.gk, err)
	}
	kr := &kindReconciler{Reconciler: r, kind: k, gvk: mapping.GroupVersionKind}
	obj := kr.object()
	// What enrolment writes on a Remote (spec, labels) or its going;
	// not its status, which the push controller writes every minute
	// and which each reconcile would answer with a read of the
	// credential Secret from the apiserver.
	enrolled := builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))
	b := ctrl.NewControllerManagedBy(mgr).Named("inventory-"+strings.ToLower(k.name)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Concurrent}).
		For(obj).
		Owns(&fleeetv1.Remote{}, enrolled)
	// The credential Secrets are the user's, or Cluster API's, and
	// unlabelled: the manager's cache holds them by their metadata
	// alone (package secrets), whose watch hears them come, go and
	// change. The reconciler reads them from the apiserver, so no
	// event runs ahead of its read.
	switch k.name {
	case ClusterProfile:
		// The token Secret has the profile's name.
		b = b.Watches(&corev1.Secret{}, handlerSameName, builder.OnlyMetadata)
	case ClusterAPI:
		// The kubeconfig Secret is <cluster>-kubeconfig, labelled with
		// the Cluster's name.
		b = b.Watches(&corev1.Secret{}, handlerClusterAPISecret, builder.OnlyMetadata)
	}
	return b.Complete(kr)
}

// kindReconciler reconciles the objects of one inventory kind.
type kindReconciler struct {
	*Reconciler
	kind inventoryKind
	gvk  schema.GroupVersionKind
}

func (r *kindReconciler) object() *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	return obj
}

// Reconcile enrols the inventory object's cluster as a Remote, or deletes
// the Remote enrolled from an object that is gone.
func (r *kindReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.object()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.unenrol(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, r.unenrol(ctx, req.NamespacedName)
	}
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: req.Namespace}, ns); err != nil {
		return ctrl.Result{}, err
	}
	if ns.Labels[fleeetv1.TenantLabel] != "true" {
		// Only a tenant's namespace holds Remotes; labelling it brings no
		// event here, so a later label needs the object touched.
		log.FromContext(ctx).V(1).Info("Namespace is not a tenant's; cluster not enrolled")
		return ctrl.Result{}, nil
	}
	ref, err := r.kind.kubeconfig(ctx, r.Reconciler, obj)
	if noCreds, ok := errors.AsType[*noCredentialsError](err); ok {
		// A change of the object or of its Secret brings us back; a
		// Remote enrolled before is left as it is.
		var related runtime.Object // untyped nil, not a nil *Secret, when none
		if noCreds.related != nil {
			related = noCreds.related
		}
		r.Recorder.Eventf(obj, related, corev1.EventTypeWarning, ReasonNoCredentials, "Enrol", "%s", noCreds.Error())
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.enrol(ctx, obj, ref)
}

// enrol creates or updates the object's Remote. A Remote of the same name
// the object does not control is left alone: an inventory entry must not
// take over a Remote someone made by hand.
func (r *kindReconciler) enrol(ctx context.Context, obj *unstructured.Unstructured, ref *fleeetv1.SecretKeyReference) error {
	remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: obj.GetName()}}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(remote), remote)
	if err == nil && !metav1.IsControlledBy(remote, obj) {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonRemoteExists, "Enrol",
			"Remote %s exists and was not enrolled from this %s; it is left as it is", remote.Name, r.kind.gk.Kind)
		return nil
	}
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	_, err = controllerutil.CreateOrPatch(ctx, r.Client, remote, func() error {
		remote.Labels = remoteLabels(obj.GetLabels(), r.kind.name)
		remote.Spec.KubeconfigRef = ref
		remote.Spec.ServiceAccountName = cmp.Or(obj.GetAnnotations()[fleeetv1.ServiceAccountAnnotation], r.ServiceAccountName)
		return controllerutil.SetControllerReference(obj, remote, r.Client.Scheme(), controllerutil.WithBlockOwnerDeletion(false))
	})
	if err != nil {
		return fmt.Errorf("enrolling %s %s as a Remote: %w", r.kind.gk.Kind, obj.GetName(), err)
	}
	return nil
}

// unenrol deletes the Remote, and the kubeconfig Secret composed for it,
// enrolled from the object key that is gone. Owner references do the same
// through the garbage collector; this covers an apiserver without it and
// does it at once. The push controller leaves the cluster's Assemblage, and
// so its workloads, as they are when a Remote goes.
func (r *kindReconciler) unenrol(ctx context.Context, key client.ObjectKey) error {
	remote := &fleeetv1.Remote{}
	if err := r.deleteEnrolled(ctx, key, remote, r.Client.Get(ctx, key, remote)); err != nil {
		return err
	}
	// A Secret composed before the manager labelled its Secrets is not in
	// the cache whole; with its owner gone, it is not labelled again.
	secret := &corev1.Secret{}
	err := secrets.GetOwned(ctx, r.Client, r.live, nil, client.ObjectKey{Namespace: key.Namespace, Name: composedSecretName(key.Name)}, secret)
	return r.deleteEnrolled(ctx, key, secret, err)
}

// deleteEnrolled deletes obj, as read with err, if it was enrolled from
// the object key of the reconciler's kind.
func (r *kindReconciler) deleteEnrolled(ctx context.Context, key client.ObjectKey, obj client.Object, err error) error {
	if err != nil || obj.GetLabels()[fleeetv1.InventoryLabel] != r.kind.name {
		return client.IgnoreNotFound(err)
	}
	if err := r.Client.Delete(ctx, obj, client.Preconditions{UID: new(obj.GetUID())}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s enrolled from %s %s: %w", obj.GetName(), r.kind.gk.Kind, key.Name, err)
	}
	return nil
}

// remoteLabels are the inventory object's labels without those under
// fleeet.dev/, which only fleeet sets, plus the inventory label.
func remoteLabels(from map[string]string, kind string) map[string]string {
	labels := map[string]string{fleeetv1.InventoryLabel: kind}
	for k, v := range from {
		if !fleeetv1.ReservedKey(k) {
			labels[k] = v
		}
	}
	return labels
}
