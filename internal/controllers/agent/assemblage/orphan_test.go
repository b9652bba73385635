package assemblage_test

import (
	"context"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// testOrphan deletes an Assemblage marked to leave its workloads, as the
// agent chart's uninstall does in namespaces it did not create: its Flux
// objects and then the Assemblage go, with no finalizer left behind, and
// what the Kustomization and the HelmRelease applied keeps running.
func (e *env) testOrphan(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := e.c.Namespace(t, "orphan", nil)
	asm := e.waitReady(t, e.create(t, ns, e.ks(ns, "config", "v1.0.0", "./configmap"), e.hr("hello", "hello", "1.2.3")))
	applied := e.configMaps(g, ns)
	g.Expect(applied).To(Equal([]string{"config", "hello-hello"}), "the Kustomization's and the chart's")

	g.Expect(testenv.Change(ctx, e.c.Client, asm, func(a *fleeetv1.Assemblage) {
		a.Annotations = map[string]string{fleeetv1.OrphanAnnotation: "true"}
	})).To(Succeed())
	g.Expect(e.c.Client.Delete(ctx, asm)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(asm), &fleeetv1.Assemblage{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Assemblage is gone: %v", err)
		g.Expect(e.appliers(g, ns)).To(BeEmpty(), "its Flux objects are gone")
	}, timeout, poll).Should(Succeed())
	g.Expect(e.configMaps(g, ns)).To(Equal(applied), "what they applied still runs")
}

// configMaps lists the names of a namespace's ConfigMaps, sorted.
func (e *env) configMaps(g Gomega, ns string) []string {
	list := &corev1.ConfigMapList{}
	g.Expect(e.c.Client.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	var names []string
	for _, cm := range list.Items {
		names = append(names, cm.Name)
	}
	slices.Sort(names)
	return names
}
