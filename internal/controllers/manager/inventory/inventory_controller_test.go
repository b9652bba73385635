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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/inventory"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/testenv"
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

// capiKubeconfig returns the Secret Cluster API writes beside the Cluster
// name once its control plane is up: <name>-kubeconfig, of Cluster API's
// type and labelled with the Cluster's name, holding kubeconfig.
func capiKubeconfig(ns, name string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-kubeconfig", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": name}},
		Type:       "cluster.x-k8s.io/secret",
		Data:       map[string][]byte{"value": kubeconfig},
	}
}

// profileToken returns the token Secret of the ClusterProfile name, as its
// owner offers it to the manager: named and labelled after the profile.
func profileToken(ns, name, token string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{fleeetv1.ClusterProfileLabel: name}},
		Data:       map[string][]byte{"token": []byte(token)},
	}
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
	runModule(t, ns)
	c := capiCluster(ns, "edge", map[string]string{"env": "prod", "zone": "us", fleeetv1.TenantLabel: "true", "team.fleeet.dev/owner": "x"})
	g.Expect(cluster.Client.Create(t.Context(), c)).To(Succeed())
	expectNoCredentials(t, g, ns, "secret edge-kubeconfig: not found", "no Remote until the control plane is up, and the Cluster's events say why")
	g.Expect(apierrors.IsNotFound(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(c), &fleeetv1.Remote{}))).To(BeTrue())

	// What Cluster API writes once the control plane is up; its watch
	// brings the Cluster back.
	g.Expect(cluster.Client.Create(t.Context(), capiKubeconfig(ns, "edge", admin))).To(Succeed())
	expectEnrolled(t, ns, "edge", inventory.ClusterAPI, "edge-kubeconfig", map[string]string{"env": "prod", "zone": "us"})
	asm := expectAssemblage(t, ns)

	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
	// Still env=prod, so the Module stays and the Assemblage compared below
	// does not change before the Cluster goes.
	labels := c.GetLabels()
	labels["zone"], labels["tier"] = "eu", "edge"
	c.SetLabels(labels)
	g.Expect(cluster.Client.Update(t.Context(), c)).To(Succeed())
	expectEnrolled(t, ns, "edge", inventory.ClusterAPI, "edge-kubeconfig", map[string]string{"env": "prod", "zone": "eu", "tier": "edge"})

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
	g.Expect(apierrors.IsNotFound(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(profile), &fleeetv1.Remote{}))).To(BeTrue())

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
	g.Expect(cluster.Client.Create(t.Context(), profileToken(ns, "edge", tr.Status.Token))).To(Succeed())

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
	g.Expect(cluster.Client.Create(t.Context(), capiKubeconfig(ns, "edge", []byte("a kubeconfig")))).To(Succeed())
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
	g.Expect(cluster.Client.Create(t.Context(), profileToken(ns, "other", "a-token"))).To(Succeed())
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

// TestClusterProfileNeverSendsATokenItsSecretDoesNotOffer: whoever may
// write ClusterProfiles but not Secrets names the token Secret (the
// profile's name) and the server it goes to (the access provider). A
// Secret of that name holding a token key is not enough: fleeet's own
// (a RegistrationToken's), a controller's, or one labelled for another
// profile is never read, and nothing is enrolled.
func TestClusterProfileNeverSendsATokenItsSecretDoesNotOffer(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}
	g.Expect(cluster.Client.Create(t.Context(), owner)).To(Succeed())
	cases := []struct {
		name   string
		labels map[string]string
		owners []metav1.OwnerReference
		note   string
	}{{
		// Where the manager keeps a RegistrationToken's bearer token.
		name:   fleeetv1.RegistrationIdentityName("edge"),
		labels: map[string]string{fleeetv1.RegistrationTokenLabel: "edge"},
		note:   "metadata.labels[" + fleeetv1.ClusterProfileLabel + "]: required",
	}, {
		name: "unlabelled",
		note: "metadata.labels[" + fleeetv1.ClusterProfileLabel + "]: required",
	}, {
		name:   "mislabelled",
		labels: map[string]string{fleeetv1.ClusterProfileLabel: "edge"},
		note:   "metadata.labels[" + fleeetv1.ClusterProfileLabel + `]: "edge", not this ClusterProfile's name`,
	}, {
		name:   "controlled",
		labels: map[string]string{fleeetv1.ClusterProfileLabel: "controlled"},
		owners: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: new(true)}},
		note:   "metadata.ownerReferences: controlled by ConfigMap owner",
	}, {
		name:   "fleeets",
		labels: map[string]string{fleeetv1.ClusterProfileLabel: "fleeets", fleeetv1.DeliverableLabel: "true"},
		note:   "metadata.labels[" + fleeetv1.DeliverableLabel + "]: a key of fleeet's own",
	}}
	for _, tc := range cases {
		g.Expect(cluster.Client.Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tc.name, Labels: tc.labels, OwnerReferences: tc.owners},
			Data:       map[string][]byte{"token": []byte("stolen-token")},
		})).To(Succeed())
		publishProfile(t, g, ns, tc.name, nil, map[string]any{"server": "https://attacker.example.com"})
		expectNoCredentials(t, g, ns, "secret "+tc.name+": "+tc.note, tc.name+": the profile's events say why its Secret is refused")
	}
	for _, tc := range cases {
		g.Expect(apierrors.IsNotFound(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: tc.name}, &fleeetv1.Remote{}))).To(BeTrue(), tc.name+": no Remote")
		g.Expect(apierrors.IsNotFound(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: tc.name + "-fleeet-kubeconfig"}, &corev1.Secret{}))).To(BeTrue(),
			tc.name+": no kubeconfig is composed with the token")
	}
	events := &eventsv1.EventList{}
	g.Expect(cluster.Client.List(t.Context(), events, client.InNamespace(ns))).To(Succeed())
	g.Expect(events.Items).NotTo(ContainElement(HaveField("Note", ContainSubstring("stolen-token"))), "no event quotes the token")
}

// TestClusterAPIClusterNeverUsesASecretClusterAPIDidNotWrite: whoever may
// write Clusters names the kubeconfig Secret (<cluster>-kubeconfig). One
// that lacks Cluster API's type or names another Cluster in its label, a
// hand-made push Remote's kubeconfig say, is never pointed at.
func TestClusterAPIClusterNeverUsesASecretClusterAPIDidNotWrite(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	for _, tc := range []struct {
		name   string
		secret func(*corev1.Secret)
		note   string
	}{{
		// A plain kubeconfig Secret, as for a hand-made push Remote.
		name: "plain",
		secret: func(s *corev1.Secret) {
			s.Type, s.Labels = corev1.SecretTypeOpaque, nil
		},
		note: `type: "Opaque", not cluster.x-k8s.io/secret; metadata.labels[cluster.x-k8s.io/cluster-name]: required, set to plain`,
	}, {
		name:   "untyped",
		secret: func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque },
		note:   `type: "Opaque", not cluster.x-k8s.io/secret; Cluster API writes both`,
	}, {
		name:   "elsewhere",
		secret: func(s *corev1.Secret) { s.Labels["cluster.x-k8s.io/cluster-name"] = "edge" },
		note:   `metadata.labels[cluster.x-k8s.io/cluster-name]: "edge", not this Cluster's name elsewhere`,
	}} {
		secret := capiKubeconfig(ns, tc.name, []byte("a kubeconfig"))
		tc.secret(secret)
		g.Expect(cluster.Client.Create(t.Context(), secret)).To(Succeed())
		g.Expect(cluster.Client.Create(t.Context(), capiCluster(ns, tc.name, map[string]string{"env": "prod"}))).To(Succeed())
		expectNoCredentials(t, g, ns, "secret "+tc.name+"-kubeconfig: "+tc.note, tc.name+": the Cluster's events say why its Secret is refused")
		g.Expect(apierrors.IsNotFound(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: tc.name}, &fleeetv1.Remote{}))).To(BeTrue(), tc.name+": no Remote")
	}

	// A Secret that stops saying it is its Cluster's is not read again, but
	// the Remote it enrolled, and so what runs, is left as it is.
	secret := capiKubeconfig(ns, "enrolled", []byte("a kubeconfig"))
	g.Expect(cluster.Client.Create(t.Context(), secret)).To(Succeed())
	c := capiCluster(ns, "enrolled", nil)
	g.Expect(cluster.Client.Create(t.Context(), c)).To(Succeed())
	remote := &fleeetv1.Remote{}
	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(c), remote)).To(Succeed())
		g.Expect(metav1.IsControlledBy(remote, c)).To(BeTrue())
	}, timeout, poll).Should(Succeed())
	delete(secret.Labels, "cluster.x-k8s.io/cluster-name")
	g.Expect(cluster.Client.Update(t.Context(), secret)).To(Succeed())
	expectNoCredentials(t, g, ns, "secret enrolled-kubeconfig: metadata.labels[cluster.x-k8s.io/cluster-name]: required", "the Cluster's events say its Secret is refused")
	kept := &fleeetv1.Remote{}
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(remote), kept)).To(Succeed())
	g.Expect(kept.UID).To(Equal(remote.UID))
	g.Expect(kept.Spec.KubeconfigRef).To(Equal(&fleeetv1.SecretKeyReference{Name: "enrolled-kubeconfig", Key: "value"}))
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

// An inventory installed after the manager started is enrolled from
// without a restart: its CRDs appear, and a Cluster of it becomes a Remote.
func TestAnInventoryInstalledAfterTheManagerStartedIsEnrolledFrom(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	late := testenv.StartCluster(t, "management")
	stop, err := testenv.StartManager(late, "inventory-late", setupInventory, func(o *ctrl.Options) { o.NewCache = secrets.NewCache })
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { stop(t.Failed()) }()
	admin, err := os.ReadFile(late.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())

	late.InstallInventoryCRDs(t)
	ns := late.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	g.Eventually(func() error {
		// The apiserver serves the new kind a moment after the install.
		return late.Client.Create(ctx, capiCluster(ns, "edge", map[string]string{"env": "prod"}))
	}, timeout, poll).Should(Succeed())
	g.Expect(late.Client.Create(ctx, capiKubeconfig(ns, "edge", admin))).To(Succeed())
	g.Eventually(func(g Gomega) {
		remote := &fleeetv1.Remote{}
		g.Expect(late.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, remote)).To(Succeed())
		g.Expect(remote.Labels).To(HaveKeyWithValue(fleeetv1.InventoryLabel, inventory.ClusterAPI))
	}, timeout, poll).Should(Succeed(), "the manager asks for the kind every 2 s here (a minute by default)")
}
