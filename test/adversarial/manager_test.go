package adversarial_test

import (
	"context"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// boundedByTheAPIServer asserts the apiserver's admission policy on the
// manager's or the agent's ServiceAccount (the chart's
// ValidatingAdmissionPolicy) refused the request, saying each of want:
// RBAC allowed it, so only the policy stands between a stolen token and the
// cluster.
func boundedByTheAPIServer(g Gomega, err error, want ...string) string {
	g.Expect(err).To(HaveOccurred(), "the request was allowed")
	g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "refused for another reason: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("ValidatingAdmissionPolicy"), "the apiserver's policy, not RBAC, refuses it")
	for _, w := range want {
		g.Expect(err.Error()).To(ContainSubstring(w))
	}
	return err.Error()
}

// managerAttacks are what a stolen token of the manager's own
// ServiceAccount, or a bug that lets a tenant steer one of its names, would
// do with the manager's ClusterRole.
func managerAttacks(ctx context.Context, f *fleet, manager client.Client, id string) []attack {
	admin := f.mgmt.Client
	victim := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "victim-controller"}}
	tokenFor := func(ns, name string) error {
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
		return manager.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, req)
	}
	return []attack{
		{"mint-a-kube-system-token", id, "TokenRequest for ServiceAccount kube-system/victim-controller", func(t *testing.T, g Gomega) string {
			g.Expect(client.IgnoreAlreadyExists(admin.Create(ctx, victim.DeepCopy()))).To(Succeed())
			return boundedByTheAPIServer(g, tokenFor(victim.Namespace, victim.Name), "only for the identities it creates")
		}},
		{"mint-a-tenant-token-outside-fleeet", id, "TokenRequest for a ServiceAccount of team-a fleeet did not create", func(t *testing.T, g Gomega) string {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "app-deployer"}}
			g.Expect(client.IgnoreAlreadyExists(admin.Create(ctx, sa))).To(Succeed())
			return boundedByTheAPIServer(g, tokenFor(tenantA, sa.Name), "only for the identities it creates")
		}},
		// RBAC's own escalation check already refuses binding rights the
		// manager does not hold (cluster-admin); these bind rights it holds.
		{"bind-a-cluster-role-it-holds", id, "RoleBinding team-a/fleeet-remote-evil to ClusterRole fleet-manager (the manager's own rights)", func(t *testing.T, g Gomega) string {
			return boundedByTheAPIServer(g, manager.Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: fleeetv1.RemoteIdentityName("evil")},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleet-manager"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tenantA, Name: fleeetv1.RemoteIdentityName("evil")}},
			}), "binds only an identity's own Role")
		}},
		{"bind-a-clusters-role-to-someone-else", id, "RoleBinding team-a/fleeet-remote-mallory to Role fleeet-remote-edge for user mallory", func(t *testing.T, g Gomega) string {
			return boundedByTheAPIServer(g, manager.Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: fleeetv1.RemoteIdentityName("mallory")},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: fleeetv1.RemoteIdentityName("edge")},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "mallory"}},
			}), "binds only an identity's own Role")
		}},
		{"role-in-kube-system", id, "Role kube-system/fleeet-remote-evil that reads Secrets there", func(t *testing.T, g Gomega) string {
			return boundedByTheAPIServer(g, manager.Create(ctx, &rbacv1.Role{
				ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: fleeetv1.RemoteIdentityName("evil")},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}}},
			}), "in tenant namespaces")
		}},
		{"secret-in-kube-system", id, "create Secret kube-system/fleeet-remote-evil", func(t *testing.T, g Gomega) string {
			return boundedByTheAPIServer(g, manager.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: fleeetv1.RemoteIdentityName("evil")},
			}), "only the Secrets it owns")
		}},
		{"overwrite-a-tenants-secret", id, "create Secret team-a/git-credentials (a name fleeet does not own)", func(t *testing.T, g Gomega) string {
			return boundedByTheAPIServer(g, manager.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "git-credentials"},
			}), "only the Secrets it owns")
		}},
		{"kustomization-on-the-management-cluster", id, "Kustomization flux-system/takeover without spec.kubeConfig (applies as Flux's own cluster-admin)", func(t *testing.T, g Gomega) string {
			g.Expect(client.IgnoreAlreadyExists(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flux-system"}}))).To(Succeed())
			return boundedByTheAPIServer(g, manager.Create(ctx, takeover("flux-system", nil)), "never to the management cluster")
		}},
		{"kustomization-in-a-tenant-namespace", id, "Kustomization team-a/takeover without spec.kubeConfig", func(t *testing.T, g Gomega) string {
			return boundedByTheAPIServer(g, manager.Create(ctx, takeover(tenantA, nil)), "never to the management cluster")
		}},
		{"kustomization-outside-tenants-with-a-kubeconfig", id, "Kustomization flux-system/takeover with a kubeConfig", func(t *testing.T, g Gomega) string {
			g.Expect(client.IgnoreAlreadyExists(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flux-system"}}))).To(Succeed())
			return boundedByTheAPIServer(g, manager.Create(ctx, takeover("flux-system", &meta.KubeConfigReference{
				SecretRef: &meta.SecretKeyReference{Name: "anything", Key: "value"}})), "only in tenant namespaces")
		}},
	}
}

// takeover is a Kustomization that applies a git path, through kubeConfig
// when it is set.
func takeover(ns string, kubeConfig *meta.KubeConfigReference) *kustomizev1.Kustomization {
	return &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "takeover"},
		Spec: kustomizev1.KustomizationSpec{
			Interval:   metav1.Duration{Duration: 10 * time.Minute},
			Path:       "./",
			Prune:      true,
			SourceRef:  kustomizev1.CrossNamespaceSourceReference{Kind: "GitRepository", Name: "takeover"},
			KubeConfig: kubeConfig,
		},
	}
}
