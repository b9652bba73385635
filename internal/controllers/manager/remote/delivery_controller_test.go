package remote_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/delivery"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// offered is the label that offers a Secret for delivery.
var offered = map[string]string{fleeetv1.DeliverableLabel: "true"}

// deliverSecrets makes a Module deliver the Secrets names.
func deliverSecrets(names ...string) func(*fleeetv1.Module) {
	return func(m *fleeetv1.Module) {
		for _, n := range names {
			m.Spec.Sync.Secrets = append(m.Spec.Sync.Secrets, fleeetv1.SecretDelivery{Name: n})
		}
	}
}

// newSecret creates Secret ns/name holding value, with labels.
func newSecret(t *testing.T, ns, name, value string, labels map[string]string, edit func(*corev1.Secret)) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Data: map[string][]byte{"password": []byte(value)}}
	if edit != nil {
		edit(s)
	}
	NewWithT(t).Expect(cluster.Client.Create(t.Context(), s)).To(Succeed())
	return s
}

// bundleOf returns what Remote ns/name's bundle delivers, by Secret name.
func bundleOf(g Gomega, ns, name string) map[string]delivery.Item {
	bundle := &corev1.Secret{}
	g.ExpectWithOffset(1, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: fleeetv1.DeliveryBundleName(name)}, bundle)).To(Succeed())
	items, err := delivery.Decode(bundle.Data)
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return items
}

// reportingRemote is a pull Remote whose cluster has sent its first
// heartbeat: only such a Remote gets a bundle.
func reportingRemote(t *testing.T, ns, name string, labels map[string]string) *fleeetv1.Remote {
	t.Helper()
	r := pullRemote(t, ns, name, labels)
	heartbeat(t, r, time.Now())
	return r
}

// A pull Remote no cluster has reported through, as a tenant can make by
// hand, gets no copy of the Secrets its plan delivers; its first heartbeat
// brings its bundle.
func TestARemoteNoClusterReportedThroughGetsNoBundle(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	r := pullRemote(t, ns, "made-by-hand", nil)
	newSecret(t, ns, "creds", "creds-value", offered, nil)
	fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, deliverSecrets("creds"))
	g.Eventually(func(g Gomega) {
		g.Expect(wholePlan(g, r).Listed().Syncs()).To(HaveLen(1))
	}, timeout, poll).Should(Succeed())
	g.Consistently(func() bool {
		err := cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: fleeetv1.DeliveryBundleName(r.Name)}, &corev1.Secret{})
		return apierrors.IsNotFound(err)
	}, 3*time.Second, poll).Should(BeTrue(), "no bundle without a cluster behind the Remote")

	heartbeat(t, r, time.Now())
	g.Eventually(func(g Gomega) map[string]delivery.Item { return bundleOf(g, ns, r.Name) }, timeout, poll).Should(HaveKey("creds"))
}

// Each selected pull Remote gets one bundle, owned by it, holding exactly
// the Secrets its plan delivers that their owners offered; the others are
// named, never quoted, in Warning events on the Module. A Remote the Module
// does not select gets nothing, and a rotation rewrites the bundles.
func TestEachPullRemoteGetsABundleOfTheOfferedSecretsItsPlanDelivers(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	eu := reportingRemote(t, ns, "eu-1", map[string]string{"region": "eu"})
	reportingRemote(t, ns, "us-1", map[string]string{"region": "us"})
	newSecret(t, ns, "git-creds", "git-value-1", offered, nil)
	newSecret(t, ns, "unoffered", "unoffered-value", nil, nil)
	newSecret(t, ns, "sa-token", "sa-token-value", offered, func(s *corev1.Secret) {
		s.Type = corev1.SecretTypeServiceAccountToken
		s.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
	})
	newSecret(t, ns, "registration", "registration-value", map[string]string{fleeetv1.DeliverableLabel: "true", fleeetv1.RegistrationTokenLabel: "t"}, nil)
	m := fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}},
		deliverSecrets("git-creds", "unoffered", "sa-token", "registration", "missing", fleeetv1.DeliveryBundleName("us-1")))

	g.Eventually(func(g Gomega) {
		items := bundleOf(g, ns, "eu-1")
		g.Expect(items).To(HaveLen(1))
		g.Expect(string(items["git-creds"].Data["password"])).To(Equal("git-value-1"))
	}, timeout, poll).Should(Succeed())
	bundle := &corev1.Secret{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleeetv1.DeliveryBundleName("eu-1")}, bundle)).To(Succeed())
	g.Expect(metav1.IsControlledBy(bundle, eu)).To(BeTrue(), "the bundle goes with its Remote")
	err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleeetv1.DeliveryBundleName("us-1")}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a Remote the Module does not select gets no bundle")

	g.Eventually(func(g Gomega) string {
		return strings.Join(warnings(g, cluster.Client, ns, "Module", m.Name, fleeetv1.ReasonSecretNotDeliverable), "\n")
	}, timeout, poll).Should(And(
		ContainSubstring("Secret unoffered is not labelled fleeet.dev/deliverable=true"),
		ContainSubstring("Secret sa-token is a ServiceAccount token"),
		ContainSubstring("Secret registration belongs to fleeet"),
		ContainSubstring("Secret missing does not exist"),
		ContainSubstring("Secret fleeet-deliveries-us-1 does not exist"),
	))

	creds := &corev1.Secret{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "git-creds"}, creds)).To(Succeed())
	creds.Data["password"] = []byte("git-value-2")
	g.Expect(cluster.Client.Update(ctx, creds)).To(Succeed())
	g.Eventually(func(g Gomega) string {
		return string(bundleOf(g, ns, "eu-1")["git-creds"].Data["password"])
	}, timeout, poll).Should(Equal("git-value-2"))

	// Taking the label away takes the Secret out of the bundle.
	delete(creds.Labels, fleeetv1.DeliverableLabel)
	g.Expect(cluster.Client.Update(ctx, creds)).To(Succeed())
	g.Eventually(func(g Gomega) map[string]delivery.Item { return bundleOf(g, ns, "eu-1") }, timeout, poll).Should(BeEmpty())

	expectNoValues(t, ns, "git-value-1", "git-value-2", "unoffered-value", "sa-token-value", "registration-value")
}

// A bundle without the label that puts the manager's own Secrets in its
// cache, as an older manager wrote them, is read from the apiserver,
// labelled again and kept up to date: never left stale, nor refused as
// someone else's.
func TestABundleWrittenWithoutTheManagersLabelIsLabelledAndRewritten(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	reportingRemote(t, ns, "edge", nil)
	creds := newSecret(t, ns, "creds", "creds-value-1", offered, nil)
	fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, deliverSecrets("creds"))
	g.Eventually(func(g Gomega) map[string]delivery.Item { return bundleOf(g, ns, "edge") }, timeout, poll).Should(HaveKey("creds"))

	bundle := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fleeetv1.DeliveryBundleName("edge")}}
	get(g, bundle)
	g.Expect(bundle.Labels).To(HaveKeyWithValue(fleeetv1.ManagedByLabel, fleeetv1.ManagedByManager))
	patch(t, bundle, `{"metadata":{"labels":{%q:null}}}`, fleeetv1.ManagedByLabel)
	creds.Data["password"] = []byte("creds-value-2")
	g.Expect(cluster.Client.Update(ctx, creds)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(string(bundleOf(g, ns, "edge")["creds"].Data["password"])).To(Equal("creds-value-2"))
		get(g, bundle)
		g.Expect(bundle.Labels).To(HaveKeyWithValue(fleeetv1.ManagedByLabel, fleeetv1.ManagedByManager))
	}, timeout, poll).Should(Succeed())
}

// A bundle that would pass what a Secret may hold is not written at all: the
// Remote keeps its last bundle, and the Module and the Remote say why.
func TestABundleTooLargeForASecretIsNotWrittenPartially(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	reportingRemote(t, ns, "edge", nil)
	newSecret(t, ns, "small", "small-value", offered, nil)
	m := fleettest.CreateModule(t, cluster.Client, ns, "app", "v1.0.0", everyRemote, deliverSecrets("small"))
	g.Eventually(func(g Gomega) map[string]delivery.Item { return bundleOf(g, ns, "edge") }, timeout, poll).Should(HaveKey("small"))

	// One Secret that no bundle can hold beside the others: two halves
	// reached the manager's cache one after the other, and a bundle with
	// the first alone fitted and was written before the second arrived.
	newSecret(t, ns, "big", strings.Repeat("x", delivery.MaxBundleBytes-1024), offered, nil)
	patch(t, m, `{"spec":{"sync":{"secrets":[{"name":"small"},{"name":"big"}]}}}`)
	// The recorder writes each Event on its own, after the reconcile that
	// made them: the Module's may land after the Remote's.
	g.Eventually(func(g Gomega) {
		g.Expect(warnings(g, cluster.Client, ns, "Remote", "edge", fleeetv1.ReasonDeliveryTooLarge)).NotTo(BeEmpty())
		g.Expect(warnings(g, cluster.Client, ns, "Module", "app", fleeetv1.ReasonDeliveryTooLarge)).NotTo(BeEmpty())
	}, timeout, poll).Should(Succeed())
	g.Expect(bundleOf(g, ns, "edge")).To(HaveLen(1), "the last bundle stays as it was")
}

// A Remote whose plan the compiler split over parts gets in its bundle the
// Secrets any part delivers, not only part 0's, and loses them once no part
// does.
func TestABundleDeliversTheSecretsOfEveryPartOfASplitPlan(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	r := reportingRemote(t, ns, "edge", nil)
	newSecret(t, ns, "creds", "creds-value", offered, nil)
	var modules []*fleeetv1.Module
	for i := range 25 {
		edit := fleettest.Filler(1500)
		if i == 24 { // the newest: in the last part
			edit = func(m *fleeetv1.Module) { fleettest.Filler(1500)(m); deliverSecrets("creds")(m) }
		}
		modules = append(modules, fleettest.CreateModule(t, cluster.Client, ns, fmt.Sprintf("app-%02d", i), "v1.0.0", everyRemote, edit))
	}
	var plan fleeetv1.ProxyPlan
	g.Eventually(func(g Gomega) {
		plan = wholePlan(g, r)
		g.Expect(plan.Listed().Syncs()).To(HaveLen(25))
	}, timeout, poll).Should(Succeed())
	g.Expect(plan.Holding("app-24")).NotTo(BeIdenticalTo(plan[0]), "the Secret's Module in a further part")
	g.Eventually(func(g Gomega) map[string]delivery.Item { return bundleOf(g, ns, r.Name) }, timeout, poll).Should(HaveKey("creds"))

	// The plan shrunk back to one part, without the Module delivering it.
	for _, m := range modules[5:] {
		g.Expect(cluster.Client.Delete(t.Context(), m)).To(Succeed())
	}
	g.Eventually(func(g Gomega) map[string]delivery.Item { return bundleOf(g, ns, r.Name) }, timeout, poll).Should(BeEmpty())
}

// A push Remote gets no bundle; the push controller writes its Secrets
// downstream itself and never over one the fleet did not deliver. Here the
// management cluster plays the downstream one, so the source Secret itself
// is the downstream Secret of that name, which must stay as it is.
func TestAPushDeliveryNeverOverwritesASecretItDidNotDeliver(t *testing.T) {
	g := NewWithT(t)
	admin, err := os.ReadFile(cluster.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	r := pushRemote(t, admin, nil)
	source := newSecret(t, r.Namespace, "git-creds", "push-value", offered, nil)
	fleettest.CreateModule(t, cluster.Client, r.Namespace, "app", "v1.0.0", everyRemote, deliverSecrets("git-creds"))
	g.Eventually(func(g Gomega) []string {
		return warnings(g, cluster.Client, r.Namespace, "Remote", r.Name, fleeetv1.ReasonDeliveryConflict)
	}, timeout, poll).Should(ContainElement(ContainSubstring("Secrets git-creds exist in namespace " + r.Namespace)))
	got := &corev1.Secret{}
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(source), got)).To(Succeed())
	g.Expect(got.ResourceVersion).To(Equal(source.ResourceVersion), "left as it is")
	g.Expect(got.Labels).NotTo(HaveKey(fleeetv1.DeliveredLabel))
	err = cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: r.Namespace, Name: fleeetv1.DeliveryBundleName(r.Name)}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a push Remote gets no bundle")
	expectNoValues(t, r.Namespace, "push-value")
}

// expectNoValues fails if any of values shows in the plans, Remotes,
// Modules or events of namespace ns.
func expectNoValues(t *testing.T, ns string, values ...string) {
	t.Helper()
	g := NewWithT(t)
	var lists []client.ObjectList
	for _, l := range []client.ObjectList{&fleeetv1.ProxyAssemblageList{}, &fleeetv1.RemoteList{}, &fleeetv1.ModuleList{}, &eventsv1.EventList{}, &fleeetv1.AssemblageList{}} {
		g.Expect(cluster.Client.List(t.Context(), l, client.InNamespace(ns))).To(Succeed())
		lists = append(lists, l)
	}
	raw, err := json.Marshal(lists)
	g.Expect(err).NotTo(HaveOccurred())
	for _, v := range values {
		g.Expect(string(raw)).NotTo(ContainSubstring(v))
	}
}
