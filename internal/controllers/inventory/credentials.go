package inventory

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
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
)

// tokenKey is the key of a ClusterProfile's token Secret, as the
// cluster-inventory-api secretreader credential plugin reads it.
const tokenKey = "token"

// noCredentialsError says a ClusterProfile offers no access the manager
// can use yet; only a change of the profile or its token Secret helps.
type noCredentialsError struct{ msg string }

func (e *noCredentialsError) Error() string { return e.msg }

// clusterAPIKubeconfig is the Secret Cluster API writes beside every
// Cluster once its control plane is up: <cluster>-kubeconfig, key value.
func clusterAPIKubeconfig(_ context.Context, _ *Reconciler, obj *unstructured.Unstructured) (*fleeetv1.SecretKeyReference, error) {
	return &fleeetv1.SecretKeyReference{Name: obj.GetName() + "-kubeconfig", Key: "value"}, nil
}

// composedSecretName is the Secret the manager writes a ClusterProfile's
// kubeconfig into.
func composedSecretName(profile string) string { return profile + "-fleeet-kubeconfig" }

// profileKubeconfig composes a kubeconfig from the profile's access
// provider r.AccessProvider (status.accessProviders, or the deprecated
// status.credentialProviders) and the token of the Secret named after the
// profile, and writes it into a Secret the profile owns. Only the server,
// its CA and TLS server name are taken from the profile: anything else a
// provider's cluster entry carries (a proxy, insecure TLS, exec
// extensions) is dropped, as the kubeconfig loader would refuse it.
func profileKubeconfig(ctx context.Context, r *Reconciler, obj *unstructured.Unstructured) (*fleeetv1.SecretKeyReference, error) {
	cluster, err := accessProvider(obj, r.AccessProvider)
	if err != nil {
		return nil, err
	}
	token := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: obj.GetName()}, token); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &noCredentialsError{fmt.Sprintf("secret %s: not found; it holds the cluster's token under key %s", obj.GetName(), tokenKey)}
		}
		return nil, err
	}
	if len(token.Data[tokenKey]) == 0 {
		return nil, &noCredentialsError{fmt.Sprintf("secret %s: data.%s: required; it holds the cluster's token", obj.GetName(), tokenKey)}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: cluster.Server, CertificateAuthorityData: cluster.CertificateAuthorityData, TLSServerName: cluster.TLSServerName}
	cfg.AuthInfos["token"] = &clientcmdapi.AuthInfo{Token: string(token.Data[tokenKey])}
	cfg.Contexts["cluster"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "token"}
	cfg.CurrentContext = "cluster"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("composing the kubeconfig of ClusterProfile %s: %w", obj.GetName(), err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: composedSecretName(obj.GetName())}}
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret)
	if err == nil && !metav1.IsControlledBy(secret, obj) {
		// Never overwrite a Secret someone else wrote.
		return nil, &noCredentialsError{fmt.Sprintf("secret %s: exists and was not written for this ClusterProfile; the manager composes the kubeconfig there", secret.Name)}
	}
	if client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	_, err = controllerutil.CreateOrPatch(ctx, r.Client, secret, func() error {
		secret.Labels = map[string]string{fleeetv1.InventoryLabel: ClusterProfile}
		secret.Data = map[string][]byte{"value": data}
		return controllerutil.SetControllerReference(obj, secret, r.Client.Scheme(), controllerutil.WithBlockOwnerDeletion(false))
	})
	if err != nil {
		return nil, fmt.Errorf("writing Secret %s: %w", secret.Name, err)
	}
	return &fleeetv1.SecretKeyReference{Name: secret.Name, Key: "value"}, nil
}

// accessProvider returns the cluster entry of the profile's access
// provider named name.
func accessProvider(obj *unstructured.Unstructured, name string) (*clientcmdv1.Cluster, error) {
	for _, field := range []string{"accessProviders", "credentialProviders"} {
		providers, _, err := unstructured.NestedSlice(obj.Object, "status", field)
		if err != nil {
			return nil, &noCredentialsError{fmt.Sprintf("status.%s: %v", field, err)}
		}
		for i, p := range providers {
			m, ok := p.(map[string]any)
			if !ok || m["name"] != name {
				continue
			}
			raw, _, _ := unstructured.NestedMap(m, "cluster")
			cluster := &clientcmdv1.Cluster{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, cluster); err != nil {
				return nil, &noCredentialsError{fmt.Sprintf("status.%s[%d].cluster: %v", field, i, err)}
			}
			if cluster.Server == "" {
				return nil, &noCredentialsError{fmt.Sprintf("status.%s[%d].cluster.server: required", field, i)}
			}
			return cluster, nil
		}
	}
	return nil, &noCredentialsError{fmt.Sprintf("status.accessProviders: no provider named %q, the one the manager reads (--inventory-access-provider)", name)}
}

// handlerSameName maps a Secret to the ClusterProfile of its name.
var handlerSameName = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
})
