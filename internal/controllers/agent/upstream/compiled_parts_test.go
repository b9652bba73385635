package upstream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/compiler"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// The compiler's own split plan, not one written by hand, runs whole on the
// cluster: a Remote selected by more Modules than one part holds gets every
// Module's sync applied downstream under part 0, the cluster reports on
// every part, and a version change of one Module reaches its Flux objects
// while every other sync keeps the Flux objects it had.
func TestTheCompilersSplitPlanRunsWholeOnTheCluster(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	l := link(t)
	const modules = 16
	stop, err := testenv.StartManager(l.mgmt, "fleet-manager", func(ctx context.Context, mgr ctrl.Manager) error {
		return (&compiler.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-manager"),
			Concurrent: 1, MaxPlanBytes: 8 << 10}).SetupWithManager(ctx, mgr)
	}, func(o *ctrl.Options) { o.Cache.DefaultNamespaces = map[string]cache.Config{l.ns: {}} })
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { stop(t.Failed()) })
	byName := map[string]*fleeetv1.Module{}
	for i := range modules {
		m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
		m.Name, m.Namespace = fmt.Sprintf("app-%02d", i), l.ns
		// About 1.5 KB a sync: five fit in a part of 8 KiB.
		m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"filler": strings.Repeat("x", 1500)}
		g.Expect(l.mgmt.Client.Create(ctx, m)).To(Succeed())
		byName[m.Name] = m
	}

	// Every part is mirrored and reported, and every sync has its Flux
	// objects, labelled with part 0 downstream.
	parts := 0
	g.Eventually(func(g Gomega) {
		list := &fleeetv1.ProxyAssemblageList{}
		g.Expect(l.mgmt.Client.List(ctx, list, client.InNamespace(l.ns))).To(Succeed())
		// Each part with its entries and those of the CompiledPlan it names.
		plan, err := plancontent.ResolvePlan(ctx, fleeetv1.GroupProxyPlans(list.Items)[clusterName].Listed(), plancontent.From(l.mgmt.Client, l.ns))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(plan.Syncs()).To(HaveLen(modules))
		for k := range plan {
			g.Expect(plan[k]).NotTo(BeNil(), "part %d published", k)
			g.Expect(l.reported(g, k)).To(HaveLen(len(plan[k].Spec.Assemblage.Syncs)), "part %d reports each of its syncs", k)
		}
		for name := range byName {
			g.Expect(l.kustomization(name)).To(Succeed(), name)
		}
		parts = len(plan)
	}, 2*timeout, poll).Should(Succeed())
	g.Expect(parts).To(BeNumerically(">=", 3), "sixteen syncs of 1.5 KB do not fit two parts of 8 KiB")
	uids := map[string]string{}
	for name := range byName {
		repo := &sourcev1.GitRepository{}
		g.Expect(l.down.Client.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: flux.ObjectName(l.up.Name, name)}, repo)).To(Succeed())
		g.Expect(repo.Labels).To(HaveKeyWithValue(fleeetv1.AssemblageLabel, l.up.Name), "%s runs under part 0", name)
		uids[name] = string(repo.UID)
	}

	// One Module's new version reaches the cluster; no other sync is
	// applied anew or removed.
	changed := byName["app-07"]
	g.Eventually(func() error {
		if err := l.mgmt.Client.Get(ctx, client.ObjectKeyFromObject(changed), changed); err != nil {
			return err
		}
		changed.Spec.Sync.Source.Git.Tag = "v1.0.1"
		return l.mgmt.Client.Update(ctx, changed)
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) string {
		repo := &sourcev1.GitRepository{}
		g.Expect(l.down.Client.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: flux.ObjectName(l.up.Name, changed.Name)}, repo)).To(Succeed())
		return repo.Spec.Reference.Tag
	}, timeout, poll).Should(Equal("v1.0.1"))
	for name, uid := range uids {
		repo := &sourcev1.GitRepository{}
		g.Expect(l.down.Client.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: flux.ObjectName(l.up.Name, name)}, repo)).To(Succeed())
		g.Expect(string(repo.UID)).To(Equal(uid), "%s keeps its Flux objects", name)
	}
}
