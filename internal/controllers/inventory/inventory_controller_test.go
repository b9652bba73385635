package inventory_test

import (
	"encoding/base64"
	"os"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/inventory"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// inventoryObject returns an inventory object of kind in apiVersion.
func inventoryObject(apiVersion, kind, ns, name string, labels map[string]string, spec map[string]any) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "spec": spec}}
	obj.SetNamespace(ns)
	obj.SetName(name)
	obj.SetLabels(labels)
	return obj
}

// capiCluster returns a Cluster API Cluster as a provider leaves it once
// its control plane is up.
func capiCluster(ns, name string, labels map[string]string) *unstructured.Unstructured {
	return inventoryObject("cluster.x-k8s.io/v1beta2", "Cluster", ns, name, labels,
		map[string]any{"controlPlaneEndpoint": map[string]any{"host": name + ".example.com", "port": int64(6443)}})
}

// runModule creates in ns the Module app, selecting env=prod.
func runModule(t *testing.T, ns string) {
	m := fleettest.NewModule("v1", &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}})
	m.Namespace = ns
	NewWithT(t).Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
}

// expectEnrolled waits for the Remote name enrolled from an inventory
// object of kind, with labels, reached through the Secret kubeconfig, and
// returns it once its plan is pushed.
func expectEnrolled(t *testing.T, ns, name, kind, kubeconfig string, labels map[string]string) *fleeetv1.Remote {
	t.Helper()
	want := map[string]string{fleeetv1.InventoryLabel: kind}
	for k, v := range labels {
		want[k] = v
	}
	r := &fleeetv1.Remote{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, r)).To(Succeed())
		g.Expect(r.Labels).To(Equal(want))
		g.Expect(r.Spec.KubeconfigRef).To(Equal(&fleeetv1.SecretKeyReference{Name: kubeconfig, Key: "value"}))
		g.Expect(r.Spec.ServiceAccountName).To(Equal(deployer))
		owner := metav1.GetControllerOf(r)
		g.Expect(owner).NotTo(BeNil())
		g.Expect(owner.Kind).To(Equal(map[string]string{inventory.ClusterAPI: "Cluster", inventory.ClusterProfile: "ClusterProfile"}[kind]))
		c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.ConnectedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonPushed))
	}, timeout, poll).Should(Succeed())
	return r
}

// expectAssemblage waits for the Assemblage of the tenant ns on the
// downstream cluster to run the Module app, and returns it.
func expectAssemblage(t *testing.T, ns string) *fleeetv1.Assemblage {
	t.Helper()
	asm := &fleeetv1.Assemblage{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: ns}, asm)).To(Succeed())
		g.Expect(asm.Spec.Syncs).To(ContainElement(HaveField("Name", "app")))
		g.Expect(asm.Spec.ServiceAccountName).To(Equal(deployer))
	}, timeout, poll).Should(Succeed())
	return asm
}

// expectRemovedKeepingWorkloads deletes obj, waits for its Remote and plan
// to go, and checks the downstream Assemblage, and so what it runs, stays.
func expectRemovedKeepingWorkloads(t *testing.T, obj client.Object, asm *fleeetv1.Assemblage) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(cluster.Client.Delete(t.Context(), obj)).To(Succeed())
	key := client.ObjectKeyFromObject(obj)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(cluster.Client.Get(t.Context(), key, &fleeetv1.Remote{})) &&
			apierrors.IsNotFound(cluster.Client.Get(t.Context(), key, &fleeetv1.ProxyAssemblage{}))
	}, timeout, poll).Should(BeTrue(), "the Remote and its plan go with the inventory object")
	kept := &fleeetv1.Assemblage{}
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(asm), kept)).To(Succeed())
	g.Expect(kept.UID).To(Equal(asm.UID), "the downstream Assemblage is never deleted")
	g.Expect(kept.DeletionTimestamp.IsZero()).To(BeTrue())
	g.Expect(kept.Spec.Syncs).To(Equal(asm.Spec.Syncs))
}

func TestClusterAPIClusterRunsAModuleFollowsItsLabelsAndLeavesWorkloadsWhenRemoved(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	admin, err := os.ReadFile(cluster.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	// What Cluster API writes once the control plane is up.
	g.Expect(cluster.Client.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-kubeconfig", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "edge"}},
		Data:       map[string][]byte{"value": admin},
	})).To(Succeed())
	runModule(t, ns)
	c := capiCluster(ns, "edge", map[string]string{"env": "prod", fleeetv1.TenantLabel: "true", "team.fleeet.dev/owner": "x"})
	g.Expect(cluster.Client.Create(t.Context(), c)).To(Succeed())

	expectEnrolled(t, ns, "edge", inventory.ClusterAPI, "edge-kubeconfig", map[string]string{"env": "prod"})
	asm := expectAssemblage(t, ns)

	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
	labels := c.GetLabels()
	labels["env"], labels["zone"] = "staging", "eu"
	c.SetLabels(labels)
	g.Expect(cluster.Client.Update(t.Context(), c)).To(Succeed())
	expectEnrolled(t, ns, "edge", inventory.ClusterAPI, "edge-kubeconfig", map[string]string{"env": "staging", "zone": "eu"})

	expectRemovedKeepingWorkloads(t, c, asm)
}

func TestClusterProfileRunsAModuleThroughItsAccessProviderAndTokenSecret(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	runModule(t, ns)
	// What the cluster manager publishes: where the cluster is and its CA.
	profile := publishProfile(t, g, ns, "edge", map[string]string{"env": "prod"},
		map[string]any{"server": cluster.Config.Host, "certificate-authority-data": base64.StdEncoding.EncodeToString(cluster.Config.CAData)})
	expectNoCredentials(t, g, ns, "secret edge: not found", "no Remote until the token Secret is there, and the profile's events say why")

	// The token the secretreader credential plugin would read: the
	// downstream ServiceAccount's.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleeet"}}
	g.Expect(cluster.Client.Create(t.Context(), sa)).To(Succeed())
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-fleeet"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
	}
	g.Expect(cluster.Client.Create(t.Context(), binding)).To(Succeed())
	t.Cleanup(func() { _ = cluster.Client.Delete(t.Context(), binding) })
	tr := &authenticationv1.TokenRequest{}
	g.Expect(cluster.Client.SubResource("token").Create(t.Context(), sa, tr)).To(Succeed())
	g.Expect(cluster.Client.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"},
		Data:       map[string][]byte{"token": []byte(tr.Status.Token)},
	})).To(Succeed())

	expectEnrolled(t, ns, "edge", inventory.ClusterProfile, "edge-fleeet-kubeconfig", map[string]string{"env": "prod"})
	asm := expectAssemblage(t, ns)
	expectRemovedKeepingWorkloads(t, profile, asm)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "edge-fleeet-kubeconfig"}, &corev1.Secret{}))
	}, timeout, poll).Should(BeTrue(), "the composed kubeconfig goes with the profile")
}

func TestInventoryNeverTakesOverAHandMadeRemoteOrSecret(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	handMade := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge", Labels: map[string]string{"env": "dev"}}}
	g.Expect(cluster.Client.Create(t.Context(), handMade)).To(Succeed())
	c := capiCluster(ns, "edge", map[string]string{"env": "prod"})
	g.Expect(cluster.Client.Create(t.Context(), c)).To(Succeed())

	g.Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(cluster.Client.List(t.Context(), events, client.InNamespace(ns))).To(Succeed())
		g.Expect(events.Items).To(ContainElement(And(HaveField("Reason", inventory.ReasonRemoteExists),
			HaveField("Regarding.Kind", "Cluster"))))
	}, timeout, poll).Should(Succeed())
	got := &fleeetv1.Remote{}
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(handMade), got)).To(Succeed())
	g.Expect(got.Labels).To(Equal(handMade.Labels))
	g.Expect(got.Spec.KubeconfigRef).To(BeNil())
	g.Expect(got.OwnerReferences).To(BeEmpty())

	// Nor a Secret where a ClusterProfile's kubeconfig would be composed.
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-fleeet-kubeconfig"}, Data: map[string][]byte{"value": []byte("theirs")}}
	g.Expect(cluster.Client.Create(t.Context(), theirs)).To(Succeed())
	g.Expect(cluster.Client.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}, Data: map[string][]byte{"token": []byte("a-token")},
	})).To(Succeed())
	publishProfile(t, g, ns, "other", nil, map[string]any{"server": "https://other.example.com"})
	expectNoCredentials(t, g, ns, "secret other-fleeet-kubeconfig: exists", "a Secret someone else made is not overwritten")
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(theirs), theirs)).To(Succeed())
	g.Expect(theirs.Data).To(Equal(map[string][]byte{"value": []byte("theirs")}))
	g.Expect(apierrors.IsNotFound(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "other"}, &fleeetv1.Remote{}))).To(BeTrue())

	// Removing the Cluster leaves the hand-made Remote too.
	g.Expect(cluster.Client.Delete(t.Context(), c)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c))
	}, timeout, poll).Should(BeTrue())
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(handMade), got)).To(Succeed())
}

// publishProfile creates a ClusterProfile managed by OCM and publishes, as
// its cluster manager does, the secretreader access provider's cluster.
func publishProfile(t *testing.T, g Gomega, ns, name string, labels map[string]string, at map[string]any) *unstructured.Unstructured {
	t.Helper()
	profile := inventoryObject("multicluster.x-k8s.io/v1alpha1", "ClusterProfile", ns, name, labels,
		map[string]any{"clusterManager": map[string]any{"name": "ocm"}})
	g.Expect(cluster.Client.Create(t.Context(), profile)).To(Succeed())
	g.Expect(unstructured.SetNestedSlice(profile.Object, []any{map[string]any{"name": "secretreader", "cluster": at}},
		"status", "accessProviders")).To(Succeed())
	g.Expect(cluster.Client.Status().Update(t.Context(), profile)).To(Succeed())
	return profile
}

// expectNoCredentials waits for a NoCredentials event in ns whose note says
// note.
func expectNoCredentials(t *testing.T, g Gomega, ns, note, why string) {
	t.Helper()
	g.Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(cluster.Client.List(t.Context(), events, client.InNamespace(ns))).To(Succeed())
		g.Expect(events.Items).To(ContainElement(And(HaveField("Reason", inventory.ReasonNoCredentials),
			HaveField("Note", ContainSubstring(note)))))
	}, timeout, poll).Should(Succeed(), why)
}
