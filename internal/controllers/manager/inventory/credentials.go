package inventory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/secrets"
)

// tokenKey is the key of a ClusterProfile's token Secret, as the
// cluster-inventory-api secretreader credential plugin reads it.
const tokenKey = "token"

// What Cluster API writes on the kubeconfig Secret it makes beside a
// Cluster, and so what tells that Secret from any other of its name.
const (
	clusterAPISecretType   corev1.SecretType = "cluster.x-k8s.io/secret"
	clusterAPINameLabel                      = "cluster.x-k8s.io/cluster-name"
	clusterAPISecretSuffix                   = "-kubeconfig"
)

// noCredentialsError says an inventory object offers no access the
// manager can use yet; only a change of the object or its Secret helps.
// Its message names Secrets and their fields, never what they hold.
type noCredentialsError struct {
	msg string
	// related is the Secret msg is about, if any, as the event's related
	// object: events of one reason about one object version join a
	// series that keeps its first note, so each Secret, and each version
	// of it, needs its own event for its note to be read.
	related *corev1.Secret
}

func (e *noCredentialsError) Error() string { return e.msg }

// secretError is a noCredentialsError about secret, as read or as named
// where it was looked for, whose message starts with the Secret's name.
func secretError(secret *corev1.Secret, format string, args ...any) *noCredentialsError {
	return &noCredentialsError{
		msg: "secret " + secret.Name + ": " + fmt.Sprintf(format, args...),
		// The Secret's identity alone: nothing it holds reaches an event.
		related: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: secret.Name, UID: secret.UID, ResourceVersion: secret.ResourceVersion}},
	}
}

// clusterAPIKubeconfig is the Secret Cluster API writes beside every
// Cluster once its control plane is up: <cluster>-kubeconfig, key value.
// Anyone who may write Clusters chooses the name, so a Secret of that name
// is used only if it carries Cluster API's type and names this Cluster in
// its cluster.x-k8s.io/cluster-name label; otherwise it could be any
// kubeconfig of the namespace, a hand-made push Remote's among them.
func clusterAPIKubeconfig(ctx context.Context, r *Reconciler, obj *unstructured.Unstructured) (*fleeetv1.SecretKeyReference, error) {
	// Only the type and labels are looked at, but the type is no metadata,
	// and the manager's cache holds this Secret by its metadata alone
	// (package secrets): it is read from the apiserver, once per version.
	// The read is as fresh as the metadata event that brought us here, or
	// fresher.
	key := client.ObjectKey{Namespace: obj.GetNamespace(), Name: obj.GetName() + clusterAPISecretSuffix}
	err := r.clusterAPISecrets.Check(ctx, r.Client, r.live, key, "", func(secret *corev1.Secret) error {
		return checkClusterAPISecret(secret, obj.GetName())
	})
	if apierrors.IsNotFound(err) {
		return nil, secretError(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
			"not found; Cluster API writes it, type %s, labelled %s=%s, once the control plane is up",
			clusterAPISecretType, clusterAPINameLabel, obj.GetName())
	}
	if err != nil {
		return nil, err
	}
	return &fleeetv1.SecretKeyReference{Name: key.Name, Key: "value"}, nil
}

// checkClusterAPISecret says, as a *noCredentialsError, why secret is not
// the kubeconfig Cluster API wrote for the Cluster named cluster.
func checkClusterAPISecret(secret *corev1.Secret, cluster string) error {
	var wrong []string
	if secret.Type != clusterAPISecretType {
		wrong = append(wrong, fmt.Sprintf("type: %q, not %s", secret.Type, clusterAPISecretType))
	}
	if v, ok := secret.Labels[clusterAPINameLabel]; !ok {
		wrong = append(wrong, fmt.Sprintf("metadata.labels[%s]: required, set to %s", clusterAPINameLabel, cluster))
	} else if v != cluster {
		wrong = append(wrong, fmt.Sprintf("metadata.labels[%s]: %q, not this Cluster's name %s", clusterAPINameLabel, v, cluster))
	}
	if len(wrong) > 0 {
		return secretError(secret, "%s; Cluster API writes both on the kubeconfig Secret it makes for the Cluster, and the manager reads no other",
			strings.Join(wrong, "; "))
	}
	return nil
}

// composedSecretName is the Secret the manager writes a ClusterProfile's
// kubeconfig into.
func composedSecretName(profile string) string { return profile + "-fleeet-kubeconfig" }

// profileKubeconfig composes a kubeconfig from the profile's access
// provider r.AccessProvider (status.accessProviders, or the deprecated
// status.credentialProviders) and the token of the Secret named after the
// profile (see profileToken), and writes it into a Secret the profile
// owns. Only the server,
// its CA and TLS server name are taken from the profile: anything else a
// provider's cluster entry carries (a proxy, insecure TLS, exec
// extensions) is dropped, as the kubeconfig loader would refuse it.
func profileKubeconfig(ctx context.Context, r *Reconciler, obj *unstructured.Unstructured) (*fleeetv1.SecretKeyReference, error) {
	cluster, err := accessProvider(obj, r.AccessProvider)
	if err != nil {
		return nil, err
	}
	token, err := profileToken(ctx, r, obj)
	if err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: cluster.Server, CertificateAuthorityData: cluster.CertificateAuthorityData, TLSServerName: cluster.TLSServerName}
	cfg.AuthInfos["token"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["cluster"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "token"}
	cfg.CurrentContext = "cluster"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("composing the kubeconfig of ClusterProfile %s: %w", obj.GetName(), err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: composedSecretName(obj.GetName())}}
	err = secrets.GetOwned(ctx, r.Client, r.live, obj, client.ObjectKeyFromObject(secret), secret)
	found := err == nil
	if found && !metav1.IsControlledBy(secret, obj) {
		// Never overwrite a Secret someone else wrote.
		return nil, secretError(secret, "exists and was not written for this ClusterProfile; the manager composes the kubeconfig there")
	}
	if client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	before := secret.DeepCopy()
	secret.Labels = secrets.Labels(map[string]string{fleeetv1.InventoryLabel: ClusterProfile})
	secret.Data = map[string][]byte{"value": data}
	if err := controllerutil.SetControllerReference(obj, secret, r.Client.Scheme(), controllerutil.WithBlockOwnerDeletion(false)); err != nil {
		return nil, err
	}
	switch {
	case !found:
		err = r.Client.Create(ctx, secret)
	case !equality.Semantic.DeepEqual(before, secret):
		err = r.Client.Patch(ctx, secret, client.MergeFrom(before))
	}
	if err != nil {
		return nil, fmt.Errorf("writing Secret %s: %w", secret.Name, err)
	}
	return &fleeetv1.SecretKeyReference{Name: secret.Name, Key: "value"}, nil
}

// profileToken returns the token of the profile's token Secret: the
// Secret of the profile's name in its namespace, key token, read from the
// apiserver (the manager's cache holds it by its metadata alone). The profile's
// writer chooses that name and the server the token is sent to, so the
// Secret must say it is this profile's: labelled
// fleeet.dev/cluster-profile=<profile>, which only whoever may write the
// Secret can do. Belt and braces, a Secret that is fleeet's own, or any
// controller's, is refused whatever its labels: one with a controller
// reference (a RegistrationToken's Secret has one) or another fleeet.dev/
// key.
func profileToken(ctx context.Context, r *Reconciler, obj *unstructured.Unstructured) (string, error) {
	name := obj.GetName()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: name}}
	if err := secrets.Get(ctx, r.Client, r.live, client.ObjectKeyFromObject(secret), secret); err != nil {
		if apierrors.IsNotFound(err) {
			return "", secretError(secret, "not found; it holds the cluster's token under key %s, labelled %s=%s", tokenKey, fleeetv1.ClusterProfileLabel, name)
		}
		return "", err
	}
	if v, ok := secret.Labels[fleeetv1.ClusterProfileLabel]; !ok {
		return "", secretError(secret, "metadata.labels[%s]: required, set to %s; it marks the Secret as this ClusterProfile's token, and no other Secret of the name is read",
			fleeetv1.ClusterProfileLabel, name)
	} else if v != name {
		return "", secretError(secret, "metadata.labels[%s]: %q, not this ClusterProfile's name %s; the Secret is not this profile's token",
			fleeetv1.ClusterProfileLabel, v, name)
	}
	if owner := metav1.GetControllerOf(secret); owner != nil {
		return "", secretError(secret, "metadata.ownerReferences: controlled by %s %s; a Secret a controller writes, fleeet's own among them, is never read as a ClusterProfile's token",
			owner.Kind, owner.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(secret.Labels)) {
		if k != fleeetv1.ClusterProfileLabel && fleeetv1.ReservedKey(k) {
			return "", secretError(secret, "metadata.labels[%s]: a key of fleeet's own; a Secret carrying one is fleeet's, never read as a ClusterProfile's token", k)
		}
	}
	if len(secret.Data[tokenKey]) == 0 {
		return "", secretError(secret, "data.%s: required; it holds the cluster's token", tokenKey)
	}
	return string(secret.Data[tokenKey]), nil
}

// accessProvider returns the cluster entry of the profile's access
// provider named name.
func accessProvider(obj *unstructured.Unstructured, name string) (*clientcmdv1.Cluster, error) {
	for _, field := range []string{"accessProviders", "credentialProviders"} {
		providers, _, err := unstructured.NestedSlice(obj.Object, "status", field)
		if err != nil {
			return nil, &noCredentialsError{msg: fmt.Sprintf("status.%s: %v", field, err)}
		}
		for i, p := range providers {
			m, ok := p.(map[string]any)
			if !ok || m["name"] != name {
				continue
			}
			raw, _, _ := unstructured.NestedMap(m, "cluster")
			cluster := &clientcmdv1.Cluster{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, cluster); err != nil {
				return nil, &noCredentialsError{msg: fmt.Sprintf("status.%s[%d].cluster: %v", field, i, err)}
			}
			if cluster.Server == "" {
				return nil, &noCredentialsError{msg: fmt.Sprintf("status.%s[%d].cluster.server: required", field, i)}
			}
			return cluster, nil
		}
	}
	return nil, &noCredentialsError{msg: fmt.Sprintf("status.accessProviders: no provider named %q, the one the manager reads (--inventory-access-provider)", name)}
}

// handlerSameName maps a Secret to the ClusterProfile of its name.
var handlerSameName = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
})

// handlerClusterAPISecret maps a Secret to the Clusters it may be the
// kubeconfig of: the one its cluster.x-k8s.io/cluster-name label names, and
// the one its name <cluster>-kubeconfig names, so a Cluster also hears of a
// Secret of its name that it refuses.
var handlerClusterAPISecret = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	if cluster, ok := o.GetLabels()[clusterAPINameLabel]; ok && cluster != "" {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: cluster}})
	}
	if cluster, ok := strings.CutSuffix(o.GetName(), clusterAPISecretSuffix); ok && cluster != "" && cluster != o.GetLabels()[clusterAPINameLabel] {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: cluster}})
	}
	return reqs
})
