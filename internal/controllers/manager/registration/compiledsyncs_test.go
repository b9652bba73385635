package registration_test

import (
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// A cluster's identity gets a CompiledSync of its namespace by the name its
// plan gives, and nothing more: it can neither list nor watch them, so it
// never learns the name of content its plan does not name, and it reads
// none in another tenant's namespace.
func TestAClusterGetsCompiledSyncsByNameOnly(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns, other := tenant(t), tenant(t)
	_, first := registered(t, ns, fleeetv1.RegistrationTokenSpec{}, "edge-1", nil)
	cfg := rest.AnonymousClientConfig(cluster.Config)
	cfg.BearerToken = first
	agent, err := client.NewWithWatch(cfg, client.Options{Scheme: cluster.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())

	compiled := func(ns string) *fleeetv1.CompiledSync {
		m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", UID: types.UID("uid-of-app-in-" + ns)}}
		sync := &fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
			Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}},
			Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy"}},
		}}
		cs := plancontent.New(m, plancontent.Name(m, sync), sync)
		g.Expect(cluster.Client.Create(ctx, cs)).To(Succeed())
		return cs
	}
	own, others := compiled(ns), compiled(other)

	got := &fleeetv1.CompiledSync{}
	g.Expect(agent.Get(ctx, client.ObjectKeyFromObject(own), got)).To(Succeed(), "the identity gets a CompiledSync by name")
	g.Expect(got.Sync.Source.Git.Tag).To(Equal("v1.0.0"))

	err = agent.List(ctx, &fleeetv1.CompiledSyncList{}, client.InNamespace(ns))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "list: got %v", err)
	w, err := agent.Watch(ctx, &fleeetv1.CompiledSyncList{}, client.InNamespace(ns))
	if err == nil {
		w.Stop()
	}
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "watch: got %v", err)
	err = agent.Get(ctx, client.ObjectKeyFromObject(others), &fleeetv1.CompiledSync{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "another tenant's: got %v", err)
}
