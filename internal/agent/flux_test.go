package agent_test

import (
	"context"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// An agent started on a cluster that does not serve Flux's kinds yet runs
// on past the cache's sync timeout, which would stop it (and crash-loop
// it) were it watching them, applies nothing meanwhile, and applies its
// Assemblages once Flux's CRDs are installed.
func TestTheAgentWaitsForFluxsKindsAndAppliesOnceTheyCome(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c := testenv.StartCluster(t, "downstream", testenv.WithoutFluxCRDs())
	const syncTimeout = 2 * time.Second
	stop, err := testenv.StartManager(c, "fleet-agent", func(ctx context.Context, mgr ctrl.Manager) error {
		return agent.Setup(ctx, mgr, agent.Options{Concurrent: 1, PushOnly: true})
	}, func(o *ctrl.Options) { o.Controller.CacheSyncTimeout = syncTimeout })
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { stop(t.Failed()) }()

	ns := c.Namespace(t, "tenant", nil)
	asm := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plan"},
		Spec: fleeetv1.AssemblageSpec{ServiceAccountName: "tenant", Syncs: []fleeetv1.NamedSync{{Name: "app", SyncSpec: fleeetv1.SyncSpec{
			Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}},
			Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy"}},
		}}}}}
	g.Expect(c.Client.Create(ctx, asm)).To(Succeed())
	// Past the sync timeout, nothing is applied: there is nothing to
	// apply it as.
	g.Consistently(func(g Gomega) {
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(asm), asm)).To(Succeed())
		g.Expect(asm.Finalizers).To(BeEmpty(), "no Assemblage is reconciled before Flux is served")
	}, 3*syncTimeout, 250*time.Millisecond).Should(Succeed())

	c.InstallFluxCRDs(t)
	g.Eventually(func(g Gomega) {
		ks := &kustomizev1.KustomizationList{}
		g.Expect(c.Client.List(ctx, ks, client.InNamespace(ns))).To(Succeed())
		g.Expect(ks.Items).To(HaveLen(1))
		g.Expect(ks.Items[0].Spec.ServiceAccountName).To(Equal("tenant"))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
}
