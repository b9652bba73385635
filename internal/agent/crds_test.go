package agent_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const assemblages = "assemblages.fleeet.dev"

// downgrade makes the installed Assemblage CRD one of an older agent, as
// Helm left it: without spec.retryRequestedAt and written by Helm.
func downgrade(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	NewWithT(t).Expect(c.Client.Get(t.Context(), client.ObjectKey{Name: assemblages}, crd)).To(Succeed())
	delete(crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "retryRequestedAt")
	crd.Annotations = nil
	NewWithT(t).Expect(c.Client.Update(t.Context(), crd, client.FieldOwner("helm"))).To(Succeed())
}

// servesRetryRequestedAt reports whether the installed Assemblage CRD has
// the field, and returns it.
func servesRetryRequestedAt(g Gomega, c client.Client) (bool, *apiextensionsv1.CustomResourceDefinition) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.ExpectWithOffset(1, c.Get(context.Background(), client.ObjectKey{Name: assemblages}, crd)).To(Succeed())
	_, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["retryRequestedAt"]
	return ok, crd
}

// served reports whether the installed Assemblage CRD has
// spec.retryRequestedAt.
func served(g Gomega, c client.Client) bool {
	ok, _ := servesRetryRequestedAt(g, c)
	return ok
}

// saClient is a client acting as ServiceAccount namespace/name.
func saClient(t *testing.T, c *testenv.Cluster, namespace, name string) client.Client {
	t.Helper()
	cfg := &rest.Config{Host: c.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: c.Config.CAData},
		BearerToken: testenv.ServiceAccountToken(t, c, namespace, name)}
	sa, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return sa
}

// TestTheAgentUpgradesItsCRDsAtStart: Helm never upgrades a chart's crds/,
// so the agent applies its own at start. An older Assemblage CRD gains the
// field it lacked while the Assemblage stored under it stays as it was;
// the chart's ClusterRole is exactly enough; an identity without it is
// told which CRD it could not upgrade and changes nothing; a CRD a newer
// agent applied is left alone, and an up-to-date one is not rewritten.
func TestTheAgentUpgradesItsCRDsAtStart(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c := testenv.StartCluster(t, "downstream")
	downgrade(t, c)
	ns := c.Namespace(t, "tenant", nil)
	asm := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plan"},
		Spec: fleeetv1.AssemblageSpec{ServiceAccountName: "tenant", RetryRequestedAt: "before"}}
	g.Expect(c.Client.Create(ctx, asm)).To(Succeed())
	g.Expect(asm.Spec.RetryRequestedAt).To(BeEmpty(), "the older CRD prunes the field")
	before := asm.DeepCopy()

	stop, err := testenv.StartManager(c, "fleet-agent", func(ctx context.Context, mgr ctrl.Manager) error {
		return agent.Setup(ctx, mgr, agent.Options{Concurrent: 1, PushOnly: true})
	})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { stop(t.Failed()) }()
	ok, crd := servesRetryRequestedAt(g, c.Client)
	g.Expect(ok).To(BeTrue(), "upgraded before the controllers started")
	g.Expect(crd.Annotations).To(HaveKeyWithValue(agent.CRDVersionAnnotation, "dev"))
	g.Expect(crd.Annotations).To(HaveKeyWithValue(agent.CRDDigestAnnotation, HavePrefix("sha256:")))
	g.Expect(crd.ManagedFields).To(ContainElement(And(HaveField("Manager", agent.Name), HaveField("Operation", metav1.ManagedFieldsOperationApply))))
	g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(asm), asm)).To(Succeed())
	g.Expect(asm.UID).To(Equal(before.UID))
	g.Expect(asm.Generation).To(Equal(before.Generation))
	g.Expect(asm.Spec).To(Equal(before.Spec))
	asm.Spec.RetryRequestedAt = "after"
	g.Expect(c.Client.Update(ctx, asm)).To(Succeed())
	g.Expect(asm.Spec.RetryRequestedAt).To(Equal("after"), "the upgraded CRD keeps the field")

	// The chart's ClusterRole, rendered and bound as the chart does, is
	// enough; a ServiceAccount without it is refused and changes nothing.
	own := c.Namespace(t, "fleeet-system", nil)
	rel := testenv.ChartOf(t, "fleet-agent").Template(t, "fleet-agent", own, map[string]any{
		"token": "x", "clusterName": "edge-1", "management": map[string]any{"url": "https://management.example.com", "namespace": "team-a"}})
	for _, obj := range testenv.Objects(t, rel) {
		if obj.GetName() == "fleet-agent-crds" {
			g.Expect(c.Client.Create(ctx, obj)).To(Succeed())
		}
	}
	for _, name := range []string{"fleet-agent", "stranger"} {
		g.Expect(c.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: name}})).To(Succeed())
	}
	downgrade(t, c)
	err = agent.UpgradeCRDs(ctx, saClient(t, c, own, "stranger"), agent.Name, "v0.5.0")
	g.Expect(err).To(MatchError(And(ContainSubstring("upgrading CustomResourceDefinition assemblages.fleeet.dev"), ContainSubstring("forbidden"))))
	g.Expect(served(g, c.Client)).To(BeFalse())
	g.Expect(agent.UpgradeCRDs(ctx, saClient(t, c, own, "fleet-agent"), agent.Name, "v0.5.0")).To(Succeed())
	ok, crd = servesRetryRequestedAt(g, c.Client)
	g.Expect(ok).To(BeTrue())
	g.Expect(crd.Annotations).To(HaveKeyWithValue(agent.CRDVersionAnnotation, "v0.5.0"))

	// Up to date: not written again. Applied by a newer agent: left alone,
	// even by an agent whose CRD differs.
	g.Expect(agent.UpgradeCRDs(ctx, c.Client, agent.Name, "v0.5.1")).To(Succeed())
	_, again := servesRetryRequestedAt(g, c.Client)
	g.Expect(again.ResourceVersion).To(Equal(crd.ResourceVersion))
	downgrade(t, c)
	_, crd = servesRetryRequestedAt(g, c.Client)
	crd.Annotations = map[string]string{agent.CRDVersionAnnotation: "v0.6.0"}
	g.Expect(c.Client.Update(ctx, crd)).To(Succeed())
	g.Expect(agent.UpgradeCRDs(ctx, c.Client, agent.Name, "v0.5.1")).To(Succeed())
	g.Expect(served(g, c.Client)).To(BeFalse(), "a newer agent's CRD is not downgraded")
}
