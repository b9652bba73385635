package secrets_test

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
)

var (
	offered = map[string]string{fleeetv1.DeliverableLabel: "true"}
	owned   = map[string]string{fleeetv1.ManagedByLabel: fleeetv1.ManagedByManager}
)

// The manager's cache serves whole the Secrets offered for delivery and
// the manager's own, as one kind: each once in a list, both to a handler,
// both through a field index; any other Secret, in any namespace, only by
// its metadata, without the annotations that may copy its data. A Secret
// whose labels change moves in or out of it.
func TestTheCacheHoldsWholeOnlyOfferedAndOwnedSecrets(t *testing.T) {
	g := NewWithT(t)
	c := testenv.StartCluster(t, "management")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	mc, err := secrets.NewCache(c.Config, cache.Options{Scheme: testenv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	const byName = "metadata.name"
	g.Expect(mc.IndexField(ctx, &corev1.Secret{}, byName, func(o client.Object) []string { return []string{o.GetName()} })).To(Succeed())
	informer, err := mc.GetInformer(ctx, &corev1.Secret{})
	g.Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	heard := map[string]int{}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(o any) {
		mu.Lock()
		defer mu.Unlock()
		heard[o.(client.Object).GetName()]++
	}})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = mc.Start(ctx) }()
	g.Expect(mc.WaitForCacheSync(ctx)).To(BeTrue())

	ns := c.Namespace(t, "tenant", nil)
	other := c.Namespace(t, "other", nil)
	create := func(ns, name string, labels ...map[string]string) client.ObjectKey {
		t.Helper()
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{},
			Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: `{"data":{"v":"secret-value"}}`}},
			Data: map[string][]byte{"v": []byte("secret-value")}}
		for _, l := range labels {
			for k, v := range l {
				secret.Labels[k] = v
			}
		}
		g.Expect(c.Client.Create(ctx, secret)).To(Succeed())
		return client.ObjectKeyFromObject(secret)
	}
	plain, elsewhere := create(ns, "plain"), create(other, "plain")
	create(ns, "offered", offered)
	create(ns, "owned", owned)
	create(ns, "both", offered, owned)
	last := create(ns, "last", offered)

	whole := func(g Gomega) []string {
		list := &corev1.SecretList{}
		g.Expect(mc.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		var names []string
		for _, s := range list.Items {
			names = append(names, s.Name)
			g.Expect(s.Data).To(HaveKey("v"), "whole")
		}
		return names
	}
	g.Eventually(whole, timeout, poll).Should(ConsistOf("offered", "owned", "both", "last"))
	g.Expect(mc.Get(ctx, last, &corev1.Secret{})).To(Succeed())
	for _, key := range []client.ObjectKey{plain, elsewhere} {
		g.Expect(apierrors.IsNotFound(mc.Get(ctx, key, &corev1.Secret{}))).To(BeTrue(), "%s is not cached whole", key)
		meta := secrets.Metadata(key)
		g.Expect(mc.Get(ctx, key, meta)).To(Succeed(), "the metadata of %s is cached", key)
		g.Expect(meta.Annotations).To(BeEmpty())
		g.Expect(meta.ManagedFields).To(BeEmpty())
	}
	metadata := &metav1.PartialObjectMetadataList{}
	metadata.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	g.Expect(mc.List(ctx, metadata, client.InNamespace(ns))).To(Succeed())
	g.Expect(metadata.Items).To(HaveLen(5))
	indexed := &corev1.SecretList{}
	g.Expect(mc.List(ctx, indexed, client.InNamespace(ns), client.MatchingFields{byName: "owned"})).To(Succeed())
	g.Expect(indexed.Items).To(HaveLen(1), "the index covers the manager's own Secrets too")
	g.Eventually(func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return map[string]int{"offered": heard["offered"], "owned": heard["owned"], "both": heard["both"], "plain": heard["plain"]}
	}, timeout, poll).Should(Equal(map[string]int{"offered": 1, "owned": 1, "both": 2, "plain": 0}), "a handler hears both; a Secret of both, from each")

	// Labelled the manager's, plain comes in; no longer offered, offered
	// goes out.
	secret := &corev1.Secret{}
	g.Expect(c.Client.Get(ctx, plain, secret)).To(Succeed())
	secret.Labels = owned
	g.Expect(c.Client.Update(ctx, secret)).To(Succeed())
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "offered"}, secret)).To(Succeed())
	secret.Labels = nil
	g.Expect(c.Client.Update(ctx, secret)).To(Succeed())
	g.Eventually(whole, timeout, poll).Should(ConsistOf("plain", "owned", "both", "last"))
}
