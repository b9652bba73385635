package manager_test

import (
	"os"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/secrets"
)

// managerCache is the cache of the manager startManager runs.
var managerCache cache.Cache

// The manager's cache holds whole only the Secrets the manager writes and
// those offered for delivery. An unrelated Secret, in a tenant namespace
// or any other, and a push Remote's kubeconfig are not in it, and the
// metadata it keeps of every Secret holds no annotation, where kubectl
// copies a Secret's data. Push mode still reads the unlabelled kubeconfig,
// from the apiserver, and follows its rotation, a refused one included,
// which nothing but the Secret's change brings back. A Secret of the
// manager's own that lost its label, as one an older manager wrote never
// had it, is labelled again and cached.
func TestTheManagersCacheHoldsOnlyItsOwnAndOfferedSecrets(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	other := cluster.Namespace(t, "other", nil)
	const value = "cache-test-value"
	create := func(ns, name string, labels map[string]string, data []byte) client.ObjectKey {
		t.Helper()
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
				Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: `{"data":{"value":"` + value + `"}}`}},
			Data: map[string][]byte{"value": data},
		}
		g.Expect(cluster.Client.Create(ctx, secret)).To(Succeed())
		return client.ObjectKeyFromObject(secret)
	}
	unrelated := []client.ObjectKey{create(ns, "unrelated", nil, []byte(value)), create(other, "unrelated", nil, []byte(value))}
	offered := create(ns, "offered", map[string]string{fleeetv1.DeliverableLabel: "true"}, []byte(value))
	issueToken(t, ns, "cached", fleeetv1.RegistrationTokenSpec{})
	token := client.ObjectKey{Namespace: ns, Name: fleeetv1.RegistrationIdentityName("cached")}

	kubeconfig, err := os.ReadFile(downstream.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	pushKubeconfig := create(ns, "edge-kubeconfig", nil, kubeconfig)
	remote := &fleeetv1.Remote{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"},
		Spec: fleeetv1.RemoteSpec{
			KubeconfigRef:      &fleeetv1.SecretKeyReference{Name: pushKubeconfig.Name, Key: "value"},
			ServiceAccountName: "deployer",
		},
	}
	g.Expect(cluster.Client.Create(ctx, remote)).To(Succeed())
	connected := func(reason string) func(g Gomega) {
		return func(g Gomega) {
			g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(remote), remote)).To(Succeed())
			c := apimeta.FindStatusCondition(remote.Status.Conditions, fleeetv1.ConnectedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(reason), c.Message)
			g.Expect(apimeta.IsStatusConditionTrue(remote.Status.Conditions, fleeetv1.StalledCondition)).To(Equal(reason != fleeetv1.ReasonPushed))
		}
	}
	g.Eventually(connected(fleeetv1.ReasonPushed), timeout, poll).Should(Succeed(), "pushed through the unlabelled kubeconfig")

	cached := func(key client.ObjectKey) error { return managerCache.Get(ctx, key, &corev1.Secret{}) }
	g.Eventually(func(g Gomega) {
		g.Expect(cached(offered)).To(Succeed())
		g.Expect(cached(token)).To(Succeed())
	}, timeout, poll).Should(Succeed())
	// The whole cache has seen the Secrets created after the unrelated ones.
	for _, key := range append(unrelated, pushKubeconfig) {
		g.Expect(apierrors.IsNotFound(cached(key))).To(BeTrue(), "Secret %s is not cached", key)
		meta := secrets.Metadata(key)
		g.Expect(managerCache.Get(ctx, key, meta)).To(Succeed(), "the metadata of Secret %s is cached", key)
		g.Expect(meta.Annotations).To(BeEmpty(), "no annotation of Secret %s is cached", key)
	}
	all := &corev1.SecretList{}
	g.Expect(managerCache.List(ctx, all)).To(Succeed())
	g.Expect(all.Items).NotTo(BeEmpty())
	for _, s := range all.Items {
		g.Expect(secrets.Offered.Matches(labels.Set(s.Labels)) || secrets.Owned.Matches(labels.Set(s.Labels))).To(BeTrue(),
			"Secret %s/%s is neither offered nor the manager's, and is cached", s.Namespace, s.Name)
	}

	// A rotation to a kubeconfig the manager refuses stalls the Remote;
	// only the Secret's next change can bring it back, and does.
	rotate := func(data []byte) {
		t.Helper()
		secret := &corev1.Secret{}
		g.Expect(cluster.Client.Get(ctx, pushKubeconfig, secret)).To(Succeed())
		secret.Data = map[string][]byte{}
		if data != nil {
			secret.Data["value"] = data
		}
		g.Expect(cluster.Client.Update(ctx, secret)).To(Succeed())
	}
	rotate(nil)
	g.Eventually(connected(fleeetv1.ReasonKubeconfigInvalid), timeout, poll).Should(Succeed())
	rotate(kubeconfig)
	g.Eventually(connected(fleeetv1.ReasonPushed), timeout, poll).Should(Succeed())
	g.Expect(apierrors.IsNotFound(cached(pushKubeconfig))).To(BeTrue(), "the kubeconfig is still not cached")

	// The token's Secret without the manager's label leaves the cache,
	// and is labelled again.
	g.Expect(cluster.Client.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: token.Name}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+fleeetv1.ManagedByLabel+`":null}}}`)))).To(Succeed())
	g.Eventually(func(g Gomega) {
		secret := &corev1.Secret{}
		g.Expect(cluster.Client.Get(ctx, token, secret)).To(Succeed())
		g.Expect(secret.Labels).To(HaveKeyWithValue(fleeetv1.ManagedByLabel, fleeetv1.ManagedByManager))
		g.Expect(cached(token)).To(Succeed())
	}, timeout, poll).Should(Succeed())
}
