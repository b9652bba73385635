package charts_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// platform is the management namespace of the tenant whose Module upgrades
// the agent.
const platform = "platform"

// upgradeVersion is the build the fleet upgrades its agents to.
const upgradeVersion = "0.2.0"

// platformNamespace is the platform tenant's management namespace: its
// Modules may release into the agent's namespace, from a plain-HTTP
// registry.
func platformNamespace() *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: platform, Labels: map[string]string{fleeetv1.TenantLabel: "true"},
		Annotations: map[string]string{"fleeet.dev/allow-insecure-http": "true", "fleeet.dev/target-namespaces": agentNamespace},
	}}
}

// expectAFleetManagedAgentUpgrade upgrades the agent the helm CLI installed
// to a new release through a Module of the platform tenant, the documented
// procedure: helm-controller takes the release over as an upgrade, the new
// agent Pod replaces the old one once Ready, and no other Pod (podinfo,
// Flux) is restarted.
func expectAFleetManagedAgentUpgrade(t *testing.T, mgmt, down *testenv.Cluster, registry, cluster string, agentLog func() string) {
	g := NewWithT(t)
	ctx := t.Context()
	makeRelease(t, registry+"/fleeet", upgradeVersion)
	others := runningPods(t, down, agentLog)
	oldAgent := podUID(t, down, agentNamespace, "fleet-agent")
	oldImage := agentImage(t, down)

	// The fleet-wide values: this test's clusters lack cluster DNS, as at
	// the install.
	fleetValues := map[string]any{"flux": map[string]any{"sourceController": map[string]any{
		"storageAdvertisedAddress": "$(SOURCE_CONTROLLER_SERVICE_HOST):$(SOURCE_CONTROLLER_SERVICE_PORT)"}}}
	values, err := json.Marshal(fleetValues)
	g.Expect(err).NotTo(HaveOccurred())
	module := &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: platform, Name: "fleet-agent"},
		Spec: fleeetv1.ModuleSpec{
			SyncPlacement: fleeetv1.SyncPlacement{
				Selector: &metav1.LabelSelector{},
				Sync: fleeetv1.SyncSpec{
					Source: fleeetv1.Source{OCI: &fleeetv1.OCISource{
						URL: "oci://" + registry + "/fleeet/charts/fleet-agent", Tag: upgradeVersion, Insecure: true}},
					Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{
						ReleaseName: "fleet-agent", TargetNamespace: agentNamespace, StorageNamespace: agentNamespace,
						ValuesFrom:  []fleeetv1.ValuesReference{{Kind: "ConfigMap", Name: "fleet-agent-values", ValuesKey: "values.yaml"}},
						Values:      &apiextensionsv1.JSON{Raw: values},
						Timeout:     &metav1.Duration{Duration: 3 * time.Minute},
						Remediation: &fleeetv1.HelmRemediation{UpgradeRetries: ptr.To[int32](0)},
					}},
				},
			},
			Rollout: fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, OnFailure: fleeetv1.RollbackOnFailure},
		},
	}
	g.Expect(mgmt.Client.Create(ctx, module)).To(Succeed())
	explain := func() string {
		m := &fleeetv1.Module{}
		_ = mgmt.Client.Get(ctx, client.ObjectKeyFromObject(module), m)
		return fmt.Sprintf("module status: %+v\nagent:\n%s", m.Status, agentLog())
	}
	newImage := regexp.MustCompile(fmt.Sprintf(`^%s/fleeet/fleet-agent:%s@sha256:[0-9a-f]{64}$`,
		regexp.QuoteMeta(registry), regexp.QuoteMeta(upgradeVersion)))
	g.Eventually(func(g Gomega) {
		g.Expect(mgmt.Client.Get(ctx, client.ObjectKeyFromObject(module), module)).To(Succeed())
		g.Expect(module.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1, Ready: 1}))
		g.Expect(agentImage(t, down)).To(MatchRegexp(newImage.String()))
		expectAgentRolledOut(t, g, down)
		// The new agent says so to every tenant it serves.
		for _, ns := range []string{tenant, platform} {
			remote := &fleeetv1.Remote{}
			g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster}, remote)).To(Succeed())
			g.Expect(remote.Status.AgentVersion).To(Equal(upgradeVersion))
		}
	}, 3*timeout, poll).Should(Succeed(), explain)
	g.Expect(podUID(t, down, agentNamespace, "fleet-agent")).NotTo(Equal(oldAgent), "the agent Pod was replaced")
	g.Expect(oldImage).NotTo(MatchRegexp(newImage.String()))
	g.Expect(runningPods(t, down, agentLog)).To(Equal(others), "no other Pod was restarted or replaced")
}

// agentImage is the image of the agent Deployment's Pods.
func agentImage(t *testing.T, down *testenv.Cluster) string {
	t.Helper()
	d := &appsv1.Deployment{}
	NewWithT(t).Expect(down.Client.Get(t.Context(), client.ObjectKey{Namespace: agentNamespace, Name: "fleet-agent"}, d)).To(Succeed())
	return d.Spec.Template.Spec.Containers[0].Image
}

// expectAgentRolledOut checks that the agent Deployment's Pods all run its
// current template and are Ready, and no other Pod of it is left.
func expectAgentRolledOut(t *testing.T, g Gomega, down *testenv.Cluster) {
	d := &appsv1.Deployment{}
	g.Expect(down.Client.Get(t.Context(), client.ObjectKey{Namespace: agentNamespace, Name: "fleet-agent"}, d)).To(Succeed())
	g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
	g.Expect(d.Status.UpdatedReplicas).To(Equal(*d.Spec.Replicas))
	g.Expect(d.Status.ReadyReplicas).To(Equal(*d.Spec.Replicas))
	g.Expect(d.Status.Replicas).To(Equal(*d.Spec.Replicas))
}

// runningPods maps each Pod of the downstream cluster other than the
// agent's, not being deleted, to its UID and restart count: what must not
// change while the agent is upgraded.
func runningPods(t *testing.T, down *testenv.Cluster, logs func() string) map[string]string {
	t.Helper()
	pods := &corev1.PodList{}
	NewWithT(t).Expect(down.Client.List(t.Context(), pods)).To(Succeed(), logs)
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Labels["app.kubernetes.io/instance"] == "fleet-agent" && p.Labels["app.kubernetes.io/name"] == "fleet-agent" {
			continue
		}
		restarts := int32(0)
		for _, c := range p.Status.ContainerStatuses {
			restarts += c.RestartCount
		}
		out[p.Namespace+"/"+p.Name] = fmt.Sprintf("%s restarts=%d", p.UID, restarts)
	}
	return out
}
