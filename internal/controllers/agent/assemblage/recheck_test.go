package assemblage_test

import (
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// testRecheck asks Flux to re-check a Ready Kustomization and a Ready
// HelmRelease at once, as it does by itself at every interval: both are
// marked Reconciling at the generation they already observed, and the
// Assemblage must report them Ready throughout, its status never flapping
// to Progressing and back (which upstream rewrites the plan's status and
// every Module summary once per interval on every cluster).
func (e *env) testRecheck(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := e.c.Namespace(t, "recheck", nil)
	asm := e.waitReady(t, e.create(t, ns, e.ks(ns, "config", "v1.0.0", "./configmap"), e.hr("hello", "hello", "1.2.3")))
	ready := map[string]fleeetv1.SyncStatus{}
	for _, s := range asm.Status.Syncs {
		ready[s.Name] = s
	}

	wc, err := client.NewWithWatch(e.c.Config, client.Options{Scheme: testenv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(ctx, &fleeetv1.AssemblageList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: asm.ResourceVersion}})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()

	token := time.Now().UTC().Format(time.RFC3339Nano)
	appliers := e.appliers(g, ns)
	g.Expect(appliers).To(HaveLen(2))
	for _, a := range appliers {
		g.Expect(testenv.Change(ctx, e.c.Client, a, func(a client.Object) {
			annotations := a.GetAnnotations()
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[meta.ReconcileRequestAnnotation] = token
			a.SetAnnotations(annotations)
		})).To(Succeed())
	}
	// Each applier ran its re-check to the end, Ready again.
	g.Eventually(func(g Gomega) {
		for sync, a := range e.appliers(g, ns) {
			u := a.(*unstructured.Unstructured)
			handled, _, _ := unstructured.NestedString(u.Object, "status", "lastHandledReconcileAt")
			g.Expect(handled).To(Equal(token), sync)
			g.Expect(readyCondition(u)).To(Equal("True"), sync)
		}
	}, timeout, poll).Should(Succeed())

	// Every status the Assemblage held meanwhile, and shortly after, kept
	// both syncs as they were.
	settled := time.After(3 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			seen, ok := ev.Object.(*fleeetv1.Assemblage)
			g.Expect(ok).To(BeTrue(), "watch event %v: %v", ev.Type, ev.Object)
			for _, s := range seen.Status.Syncs {
				g.Expect(s).To(Equal(ready[s.Name]), "sync %s while Flux re-checked it", s.Name)
			}
		case <-settled:
			return
		}
	}
}

// readyCondition is the status of a Flux object's Ready condition.
func readyCondition(u *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == fleeetv1.ReadyCondition {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}
