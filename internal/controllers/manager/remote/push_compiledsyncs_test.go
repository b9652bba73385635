package remote_test

import (
	"os"
	"testing"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// A push Remote's plan whose entry names a CompiledSync is pushed with the
// sync whole: the Assemblage downstream names no CompiledSync. An entry
// naming one the manager cannot read pushes nothing, and the Remote says
// which.
func TestPushResolvesPlanEntriesNamingCompiledSyncs(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	admin, err := os.ReadFile(cluster.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	r := pushRemote(t, admin, nil)
	// The management cluster plays the downstream one. Suspended, the
	// Remote's plan is left to the test by the compiler.
	g.Eventually(func(g Gomega) { g.Expect(downstreamParts(g, r.Namespace)).To(HaveLen(1)) }, timeout, poll).Should(Succeed())
	patch(t, r, `{"spec":{"suspend":true}}`)
	judged(t, r)

	sync := fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v2.0.0"}},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy"}},
	}}
	m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: "app", UID: "uid-of-app"}}
	name := plancontent.Name(m, &sync)
	g.Expect(cluster.Client.Create(ctx, plancontent.New(m, name, &sync))).To(Succeed())
	pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name}}
	g.Expect(testenv.Change(ctx, cluster.Client, pa, func(pa *fleeetv1.ProxyAssemblage) {
		pa.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{plancontent.Entry(&sync, name)}
	})).To(Succeed())

	g.Eventually(func(g Gomega) {
		asm := downstreamParts(g, r.Namespace)[r.Namespace]
		g.Expect(asm.Spec.Syncs).To(HaveExactElements(And(HaveField("Name", "app"), HaveField("Content", ""),
			HaveField("Source", sync.Source), HaveField("Package.Kustomize.Path", "./deploy"))), "the sync whole, naming no CompiledSync")
		got := &fleeetv1.Remote{ObjectMeta: r.ObjectMeta}
		get(g, got)
		g.Expect(apimeta.FindStatusCondition(got.Status.Conditions, fleeetv1.ReadyCondition)).
			To(HaveValue(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", fleeetv1.ReasonPushed))))
	}, timeout, poll).Should(Succeed())
	get(g, pa)
	g.Expect(pa.Spec.Assemblage.Syncs).To(Equal([]fleeetv1.NamedSync{plancontent.Entry(&sync, name)}), "the plan keeps naming its CompiledSync")

	// The next version's CompiledSync is not there.
	next := *sync.DeepCopy()
	next.Source.Git.Tag = "v2.1.0"
	missing := plancontent.Name(m, &next)
	held := downstreamParts(g, r.Namespace)
	g.Expect(testenv.Change(ctx, cluster.Client, pa, func(pa *fleeetv1.ProxyAssemblage) {
		pa.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{plancontent.Entry(&next, missing)}
	})).To(Succeed())
	expectNotWhole(t, r, "reading CompiledSync "+missing+" of sync app", held)
}
