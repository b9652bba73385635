package adversarial_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// deliveryValues are the values of every Secret the delivery attacks
// create; none may show anywhere but in Secrets.
var deliveryValues = []string{"delivered-adv-v1", "delivered-adv-v2", "unoffered-adv-value", "sa-token-adv-value", "taken-adv-value", "downstream-own-value"}

// deliveryAttacks try to have the fleet carry Secrets it must not, put them
// where they must not go, or read them as the wrong cluster. They run as
// alice (a tenant of team-a with every right on its Secrets) and as the
// edge cluster of team-a.
func deliveryAttacks(ctx context.Context, f *fleet, alice, cluster client.Client, aliceID, clusterID string) []attack {
	admin, down := f.mgmt.Client, f.down.Client
	secret := func(name, value string, labels map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name, Labels: labels},
			StringData: map[string]string{"username": "fleet", "password": value}}
	}
	offered := map[string]string{fleeetv1.DeliverableLabel: "true"}
	// deliver creates a Module of team-a syncing a ConfigMap to the edge
	// cluster and delivering names, and returns it.
	deliver := func(t *testing.T, g Gomega, name string, change func(*fleeetv1.Module), names ...string) *fleeetv1.Module {
		url, _ := f.git.Commit(t, "team-a-"+name, map[string]string{
			"deploy/kustomization.yaml": "resources: [cm.yaml]\n",
			"deploy/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n",
		}, "v1.0.0")
		m := module(tenantA, name, func(m *fleeetv1.Module) {
			m.Spec.Sync.Source.Git.URL = url
			for _, n := range names {
				m.Spec.Sync.Secrets = append(m.Spec.Sync.Secrets, fleeetv1.SecretDelivery{Name: n})
			}
			if change != nil {
				change(m)
			}
		})
		g.Expect(alice.Create(ctx, m)).To(Succeed())
		return m
	}
	// notDeliverable waits for the Module to say why a Secret is not
	// delivered, and returns what it says.
	notDeliverable := func(g Gomega, m *fleeetv1.Module, want string) string {
		var msg string
		g.Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
			c := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(fleeetv1.ReasonSecretNotDeliverable))
			g.Expect(c.Message).To(ContainSubstring(want))
			msg = c.Message
		}, timeout, poll).Should(Succeed(), f.logs)
		return msg
	}
	// bundle is what edge's bundle delivers now, by Secret name.
	bundle := func(g Gomega) map[string][]byte {
		b := &corev1.Secret{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: fleeetv1.DeliveryBundleName("edge")}, b)).To(Succeed())
		return b.Data
	}
	absentDownstream := func(g Gomega, ns, name string) {
		err := down.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Secret %s/%s downstream: %v", ns, name, err)
	}
	return []attack{
		{"deliver-and-rotate", aliceID, "deliver an offered Secret as git credentials, then rotate it", func(t *testing.T, g Gomega) string {
			g.Expect(alice.Create(ctx, secret("git-creds", "delivered-adv-v1", offered))).To(Succeed())
			m := deliver(t, g, "delivered", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source.SecretRef = &fleeetv1.LocalObjectReference{Name: "git-creds"}
			}, "git-creds")
			password := func(g Gomega) string {
				s := &corev1.Secret{}
				g.Expect(down.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "git-creds"}, s)).To(Succeed())
				g.Expect(s.Labels).To(HaveKeyWithValue(fleeetv1.DeliveredLabel, "true"))
				return string(s.Data["password"])
			}
			ready := func(g Gomega) {
				pa := &fleeetv1.ProxyAssemblage{}
				g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "edge"}, pa)).To(Succeed())
				st := pa.ReportedSync(m.Name)
				g.Expect(st).NotTo(BeNil())
				g.Expect(st.State).To(Equal(fleeetv1.SyncReady), st.Message)
			}
			g.Eventually(password, 2*timeout, poll).Should(Equal("delivered-adv-v1"), f.logs)
			g.Eventually(ready, 2*timeout, poll).Should(Succeed(), f.logs)
			g.Expect(testenv.Change(ctx, alice, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "git-creds"}}, func(s *corev1.Secret) {
				s.Data["password"] = []byte("delivered-adv-v2")
			})).To(Succeed())
			g.Eventually(password, timeout, poll).Should(Equal("delivered-adv-v2"), f.logs)
			g.Consistently(ready, "3s", poll).Should(Succeed(), "the sync using it stays Ready across the rotation")
			for _, ns := range []string{tenantB, agentNamespace} {
				absentDownstream(g, ns, "git-creds")
			}
			return "delivered into team-a only, rotated in place; the sync stayed Ready"
		}},
		{"deliver-an-unoffered-secret", aliceID, "a Module delivering a Secret not labelled fleeet.dev/deliverable", func(t *testing.T, g Gomega) string {
			g.Expect(alice.Create(ctx, secret("unoffered", "unoffered-adv-value", nil))).To(Succeed())
			msg := notDeliverable(g, deliver(t, g, "unoffered", nil, "unoffered"), "Secret unoffered is not labelled")
			g.Expect(bundle(g)).NotTo(HaveKey("unoffered"))
			absentDownstream(g, tenantA, "unoffered")
			return msg
		}},
		{"deliver-a-service-account-token", aliceID, "a Module delivering a labelled ServiceAccount token Secret", func(t *testing.T, g Gomega) string {
			token := secret("sa-token", "sa-token-adv-value", offered)
			token.Type = corev1.SecretTypeServiceAccountToken
			token.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
			g.Expect(alice.Create(ctx, token)).To(Succeed())
			msg := notDeliverable(g, deliver(t, g, "token", nil, "sa-token"), "Secret sa-token is a ServiceAccount token")
			g.Expect(bundle(g)).NotTo(HaveKey("sa-token"))
			absentDownstream(g, tenantA, "sa-token")
			return msg
		}},
		{"deliver-a-cluster-bundle", aliceID, "a Module delivering a Secret named as a cluster's bundle, labelled deliverable by alice", func(t *testing.T, g Gomega) string {
			// A bundle is fleeet's, whatever it holds, never alice's to pass on.
			name := fleeetv1.DeliveryBundleName("ghost")
			g.Expect(alice.Create(ctx, secret(name, "delivered-adv-v1", offered))).To(Succeed())
			msg := notDeliverable(g, deliver(t, g, "bundle", nil, name), "belongs to fleeet")
			absentDownstream(g, tenantA, name)
			return msg
		}},
		{"name-another-tenants-secret", aliceID, "a Module naming Secret db with namespace team-b in spec.sync.secrets", func(t *testing.T, g Gomega) string {
			u := &unstructured.Unstructured{}
			raw, err := json.Marshal(module(tenantA, "crossing", nil))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(json.Unmarshal(raw, &u.Object)).To(Succeed())
			u.SetGroupVersionKind(fleeetv1.GroupVersion.WithKind("Module"))
			g.Expect(unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "db", "namespace": tenantB}}, "spec", "sync", "secrets")).To(Succeed())
			err = alice.Create(ctx, u.DeepCopy(), client.FieldValidation("Strict"))
			g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "refused for another reason: %v", err)
			g.Expect(err.Error()).To(ContainSubstring(`unknown field "spec.sync.secrets[0].namespace"`))
			// Unvalidated, the field is pruned: db is team-a's.
			g.Expect(alice.Create(ctx, u, client.FieldValidation("Ignore"))).To(Succeed())
			stored := &fleeetv1.Module{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(u), stored)).To(Succeed())
			g.Expect(stored.Spec.Sync.Secrets).To(Equal([]fleeetv1.SecretDelivery{{Name: "db"}}))
			return "strict: " + err.Error() + "; otherwise pruned, naming team-a's db"
		}},
		{"read-another-clusters-bundle", clusterID, "get Secret team-a/" + fleeetv1.DeliveryBundleName("other"), func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: fleeetv1.DeliveryBundleName("other")}, &corev1.Secret{}))
		}},
		{"read-an-offered-secret", clusterID, "get Secret team-a/git-creds directly", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "git-creds"}, &corev1.Secret{}))
		}},
		{"overwrite-a-downstream-secret", aliceID, "deliver Secret taken over one of that name downstream the fleet did not deliver", func(t *testing.T, g Gomega) string {
			g.Expect(down.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "taken"},
				StringData: map[string]string{"password": "downstream-own-value"}})).To(Succeed())
			g.Expect(alice.Create(ctx, secret("taken", "taken-adv-value", offered))).To(Succeed())
			deliver(t, g, "taken", nil, "taken")
			var msg string
			g.Eventually(func(g Gomega) {
				ups := &fleeetv1.UpstreamList{}
				g.Expect(down.List(ctx, ups, client.InNamespace(agentNamespace))).To(Succeed())
				i := slices.IndexFunc(ups.Items, func(u fleeetv1.Upstream) bool { return u.Spec.Management.Namespace == tenantA })
				g.Expect(i).NotTo(Equal(-1))
				c := apimeta.FindStatusCondition(ups.Items[i].Status.Conditions, fleeetv1.DeliveredCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Reason).To(Equal(fleeetv1.ReasonDeliveryConflict))
				msg = c.Message
			}, timeout, poll).Should(Succeed(), f.logs)
			s := &corev1.Secret{}
			g.Expect(down.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "taken"}, s)).To(Succeed())
			g.Expect(string(s.Data["password"])).To(Equal("downstream-own-value"))
			g.Expect(s.Labels).NotTo(HaveKey(fleeetv1.DeliveredLabel))
			return "left as it was; Upstream: " + msg
		}},
		{"values-anywhere-but-secrets", aliceID, "look for every delivered value in plans, statuses, events and the manager's and agents' logs", func(t *testing.T, g Gomega) string {
			var objs []any
			for _, c := range []struct {
				cl   client.Client
				list client.ObjectList
			}{
				{admin, &fleeetv1.ProxyAssemblageList{}}, {admin, &fleeetv1.ModuleList{}}, {admin, &fleeetv1.RemoteList{}},
				{admin, &eventsv1.EventList{}}, {admin, &corev1.EventList{}},
				{down, &fleeetv1.AssemblageList{}}, {down, &fleeetv1.UpstreamList{}}, {down, &eventsv1.EventList{}}, {down, &corev1.EventList{}},
			} {
				g.Expect(c.cl.List(ctx, c.list)).To(Succeed())
				objs = append(objs, c.list)
			}
			raw, err := json.Marshal(objs)
			g.Expect(err).NotTo(HaveOccurred())
			seen := string(raw)
			g.Expect(seen).To(ContainSubstring("git-creds"), "the scan reads what names the Secrets")
			logs := testenv.Tail(f.manager.LogPath, 1<<20) + testenv.Tail(f.agent.LogPath, 1<<20) + testenv.Tail(f.pushAgent.LogPath, 1<<20)
			for _, v := range deliveryValues {
				g.Expect(seen).NotTo(ContainSubstring(v))
				g.Expect(logs).NotTo(ContainSubstring(v))
			}
			return "none of " + strings.Join(deliveryValues, ", ") + " in any plan, status, event or log"
		}},
	}
}
