package adversarial_test

import (
	"context"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// agentAttacks are what a stolen token of the agent's own ServiceAccount
// downstream would do with the chart's Roles, and what the push token a
// tenant hands the manager (the push release's <release>-push) would: RBAC
// lets both create and patch every Secret of their tenant namespaces (and
// read none) and the agent write every Flux object there, so the chart's
// ValidatingAdmissionPolicy
// <release>-bounds is what holds them to the Secrets the fleet delivered
// and to Flux objects that run as the tenant's ServiceAccount. The cases
// named …-as-the-agent-does and …-as-the-manager-does are their own work,
// which the policy must let through.
func agentAttacks(t *testing.T, f *fleet) []attack {
	ctx := t.Context()
	agent := bearer(t, f.down, mint(t, f.down, agentNamespace, "fleet-agent"))
	const agentID = "a stolen token of the agent's ServiceAccount fleeet-system/fleet-agent downstream (the chart's Roles)"
	push := bearer(t, f.down, mint(t, f.down, pushNamespace, pushRelease+"-push"))
	const pushID = "the push token team-c hands the manager: ServiceAccount fleeet-push/team-c-agent-push downstream"
	down := f.down.Client
	secret := func(ns, name string, labels map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			StringData: map[string]string{"password": "tenant-own-value"}}
	}
	delivered := map[string]string{fleeetv1.DeliveredLabel: "true"}
	overwrite := client.RawPatch(types.MergePatchType, []byte(`{"data":{"password":"YXR0YWNrZXItdmFsdWU="}}`))
	// tenantsOwn is a Secret of the tenant's, unlabelled, as the tenant's
	// admin created it.
	tenantsOwn := func(g Gomega, ns string) *corev1.Secret {
		s := secret(ns, "db-password", nil)
		g.Expect(client.IgnoreAlreadyExists(down.Create(ctx, s.DeepCopy()))).To(Succeed())
		g.Expect(down.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
		return s
	}
	// keptFrom asserts the apiserver refused a write to the tenant's own
	// Secret s, naming want, and that s is as the tenant left it.
	keptFrom := func(g Gomega, s *corev1.Secret, err error, want string) string {
		out := boundedByTheAPIServer(g, err, want)
		now := &corev1.Secret{}
		g.Expect(down.Get(ctx, client.ObjectKeyFromObject(s), now)).To(Succeed(), "the tenant's Secret is still there")
		g.Expect(now.Labels).NotTo(HaveKey(fleeetv1.DeliveredLabel))
		g.Expect(now.Data).To(HaveKeyWithValue("password", []byte("tenant-own-value")))
		return out
	}
	tokenSecret := func(ns string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "minted", Labels: delivered,
			Annotations: map[string]string{corev1.ServiceAccountNameKey: tenantSA}}, Type: corev1.SecretTypeServiceAccountToken}
	}
	kustomization := func(name, sa string) *kustomizev1.Kustomization {
		k := takeover(tenantA, nil)
		k.Name, k.Spec.ServiceAccountName = name, sa
		return k
	}
	helmRelease := func(name, sa string) *helmv2.HelmRelease {
		return &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name},
			Spec: helmv2.HelmReleaseSpec{Interval: metav1.Duration{Duration: 10 * time.Minute}, ServiceAccountName: sa,
				ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "takeover"}}}
	}
	// remove deletes, as the admin, what an attack may have left.
	remove := func(t *testing.T, objs ...client.Object) {
		t.Cleanup(func() {
			for _, o := range objs {
				_ = client.IgnoreNotFound(down.Delete(context.Background(), o))
			}
		})
	}
	// helmRecord is a forged record of a newer revision of the agent's
	// release: Helm's next upgrade or rollback, run as cluster-admin,
	// would take it for the release deployed.
	helmRecord := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: "sh.helm.release.v1.fleet-agent.v99",
		Labels: map[string]string{"owner": "helm", "name": "fleet-agent", "status": "deployed", "version": "99"}},
		Type: "helm.sh/release.v1", StringData: map[string]string{"release": "forged"}}
	return []attack{
		{"delivers-a-secret-as-the-agent-does", agentID, "create, patch and delete Secret team-a/adv-delivered labelled fleeet.dev/delivered=true (the agent's own work: allowed)", func(t *testing.T, g Gomega) string {
			s := secret(tenantA, "adv-delivered", delivered)
			remove(t, s.DeepCopy())
			return deliverAs(ctx, g, agent, s)
		}},
		{"keeps-its-credential-as-the-agent-does", agentID, "get and update Secret fleeet-system/team-a-credential, unchanged (the agent's own work: allowed)", func(t *testing.T, g Gomega) string {
			// The running agent renews this Secret too: an update racing
			// with it is a conflict, and is sent again.
			g.Eventually(func(g Gomega) {
				s := &corev1.Secret{}
				g.Expect(agent.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: tenantA + "-credential"}, s)).To(Succeed())
				g.Expect(agent.Update(ctx, s)).To(Succeed())
			}).Should(Succeed())
			return "allowed: read and written by name"
		}},
		{"applies-as-the-tenant-as-the-agent-does", agentID, "create Kustomization team-a/adv-tenant with spec.serviceAccountName " + tenantSA + " (the agent's own work: allowed)", func(t *testing.T, g Gomega) string {
			// retarget-a-kustomization changes it, then removes it.
			g.Expect(agent.Create(ctx, kustomization("adv-tenant", tenantSA))).To(Succeed())
			return "allowed: created"
		}},
		{"push-delivers-a-secret-as-the-manager-does", pushID, "create, patch and delete Secret team-c/adv-pushed labelled fleeet.dev/delivered=true (the manager's push: allowed)", func(t *testing.T, g Gomega) string {
			s := secret(tenantC, "adv-pushed", delivered)
			remove(t, s.DeepCopy())
			return deliverAs(ctx, g, push, s)
		}},
		{"overwrite-a-tenants-secret", agentID, "patch Secret team-a/db-password, the tenant's own (unlabelled)", func(t *testing.T, g Gomega) string {
			s := tenantsOwn(g, tenantA)
			return keptFrom(g, s, agent.Patch(ctx, s, overwrite), "is not labelled fleeet.dev/delivered=true")
		}},
		{"claim-a-tenants-secret", agentID, "patch Secret team-a/db-password adding the label fleeet.dev/delivered=true, to make it the fleet's", func(t *testing.T, g Gomega) string {
			s := tenantsOwn(g, tenantA)
			return keptFrom(g, s, agent.Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"fleeet.dev/delivered":"true"}}}`))),
				"is not labelled fleeet.dev/delivered=true")
		}},
		{"read-a-tenants-secret", agentID, "get Secret team-a/db-password, the tenant's own, and list team-a's Secrets", func(t *testing.T, g Gomega) string {
			s := tenantsOwn(g, tenantA)
			refusedByRBAC(g, agent.List(ctx, &corev1.SecretList{}, client.InNamespace(tenantA)))
			return refusedByRBAC(g, agent.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Secret{}))
		}},
		{"read-a-delivered-secret", agentID, "get Secret team-a/adv-read, one the fleet delivered", func(t *testing.T, g Gomega) string {
			s := secret(tenantA, "adv-read", delivered)
			remove(t, s.DeepCopy())
			g.Expect(down.Create(ctx, s)).To(Succeed())
			return refusedByRBAC(g, agent.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Secret{}))
		}},
		{"read-a-tenants-secret-through-an-empty-patch", agentID, "patch Secret team-a/db-password with a JSON patch that changes nothing, to read it from the answer", func(t *testing.T, g Gomega) string {
			s := tenantsOwn(g, tenantA)
			got := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: s.Name}}
			out := keptFrom(g, s, agent.Patch(ctx, got, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"test","path":"/metadata/name","value":"db-password"}]`))),
				"is not labelled fleeet.dev/delivered=true")
			g.Expect(got.Data).To(BeEmpty(), "nothing of the Secret came back")
			return out
		}},
		{"delete-a-tenants-secret", agentID, "delete Secret team-a/db-password, the tenant's own", func(t *testing.T, g Gomega) string {
			s := tenantsOwn(g, tenantA)
			return keptFrom(g, s, agent.Delete(ctx, s), "deletes only the Secrets the fleet delivered")
		}},
		{"strip-the-delivered-label", agentID, "patch a delivered Secret team-a/adv-strip, taking the label fleeet.dev/delivered off", func(t *testing.T, g Gomega) string {
			s := secret(tenantA, "adv-strip", delivered)
			remove(t, s.DeepCopy())
			g.Expect(down.Create(ctx, s)).To(Succeed())
			return boundedByTheAPIServer(g, agent.Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"fleeet.dev/delivered":null}}}`))),
				"never takes the label fleeet.dev/delivered=true off")
		}},
		{"plant-an-unlabelled-secret", agentID, "create Secret team-a/adv-planted without the label fleeet.dev/delivered", func(t *testing.T, g Gomega) string {
			s := secret(tenantA, "adv-planted", nil)
			remove(t, s.DeepCopy())
			return boundedByTheAPIServer(g, agent.Create(ctx, s), "creates Secrets in tenant namespaces only labelled fleeet.dev/delivered=true")
		}},
		{"mint-a-token-through-a-secret", agentID, "create a delivered-labelled Secret team-a/minted of type kubernetes.io/service-account-token for ServiceAccount " + tenantSA, func(t *testing.T, g Gomega) string {
			s := tokenSecret(tenantA)
			remove(t, s.DeepCopy())
			return boundedByTheAPIServer(g, agent.Create(ctx, s), "never writes a kubernetes.io/service-account-token Secret")
		}},
		{"forge-a-helm-release-record", agentID, "create Secret fleeet-system/sh.helm.release.v1.fleet-agent.v99, a forged newer record of the agent's release", func(t *testing.T, g Gomega) string {
			s := helmRecord.DeepCopy()
			remove(t, s.DeepCopy())
			return boundedByTheAPIServer(g, agent.Create(ctx, s), "in its own namespace, only its Upstreams' credential and registration token Secrets")
		}},
		{"read-the-release-namespaces-secrets", agentID, "list Secrets in fleeet-system, and get Helm's record of the release there", func(t *testing.T, g Gomega) string {
			refusedByRBAC(g, agent.List(ctx, &corev1.SecretList{}, client.InNamespace(agentNamespace)))
			return refusedByRBAC(g, agent.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "sh.helm.release.v1.fleet-agent.v1"}, &corev1.Secret{}))
		}},
		{"kustomization-without-a-service-account", agentID, "create Kustomization team-a/adv-unset without spec.serviceAccountName (Flux would apply as itself)", func(t *testing.T, g Gomega) string {
			k := kustomization("adv-unset", "")
			remove(t, k.DeepCopy())
			return boundedByTheAPIServer(g, agent.Create(ctx, k), "spec.serviceAccountName of kustomizations team-a/adv-unset", "not unset")
		}},
		{"kustomization-as-another-service-account", agentID, "create Kustomization team-a/adv-default running as ServiceAccount default", func(t *testing.T, g Gomega) string {
			k := kustomization("adv-default", "default")
			remove(t, k.DeepCopy())
			return boundedByTheAPIServer(g, agent.Create(ctx, k), "only running as the tenant's ServiceAccount "+tenantSA, "not default")
		}},
		{"retarget-a-kustomization", agentID, "update Kustomization team-a/adv-tenant (running as " + tenantSA + ") to run as ServiceAccount default", func(t *testing.T, g Gomega) string {
			k := &kustomizev1.Kustomization{}
			g.Expect(down.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "adv-tenant"}, k)).To(Succeed())
			remove(t, k.DeepCopy())
			// kustomize-controller writes the Kustomization's status and
			// finalizer; an update racing with that is a conflict, which
			// the apiserver says before admission, and is sent again.
			var msg string
			g.Eventually(func(g Gomega) {
				g.Expect(down.Get(ctx, client.ObjectKeyFromObject(k), k)).To(Succeed())
				k.Spec.ServiceAccountName = "default"
				err := agent.Update(ctx, k)
				g.Expect(apierrors.IsConflict(err)).To(BeFalse(), "raced with kustomize-controller: %v", err)
				msg = boundedByTheAPIServer(g, err, "spec.serviceAccountName of kustomizations team-a/adv-tenant", "not default")
			}).Should(Succeed())
			return msg
		}},
		{"helmrelease-without-a-service-account", agentID, "create HelmRelease team-a/adv-unset without spec.serviceAccountName", func(t *testing.T, g Gomega) string {
			hr := helmRelease("adv-unset", "")
			remove(t, hr.DeepCopy())
			return boundedByTheAPIServer(g, agent.Create(ctx, hr), "spec.serviceAccountName of helmreleases team-a/adv-unset", "not unset")
		}},
		{"helmrelease-as-another-service-account", agentID, "create HelmRelease team-a/adv-default running as ServiceAccount default", func(t *testing.T, g Gomega) string {
			hr := helmRelease("adv-default", "default")
			remove(t, hr.DeepCopy())
			return boundedByTheAPIServer(g, agent.Create(ctx, hr), "spec.serviceAccountName of helmreleases team-a/adv-default", "not default")
		}},
		{"source-with-fluxs-cloud-identity", agentID, "create OCIRepository team-a/adv-cloud with spec.provider aws (source-controller's own cloud identity)", func(t *testing.T, g Gomega) string {
			repo := &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "adv-cloud"},
				Spec: sourcev1.OCIRepositorySpec{URL: "oci://123456789012.dkr.ecr.eu-west-1.amazonaws.com/private", Provider: "aws",
					Interval: metav1.Duration{Duration: 10 * time.Minute}, Reference: &sourcev1.OCIRepositoryRef{Tag: "v1"}}}
			remove(t, repo.DeepCopy())
			return boundedByTheAPIServer(g, agent.Create(ctx, repo), "spec.provider and spec.serviceAccountName of ocirepositories team-a/adv-cloud")
		}},
		{"crd-conversion-webhook", agentID, "patch CustomResourceDefinition assemblages.fleeet.dev with a conversion webhook at an attacker's URL", func(t *testing.T, g Gomega) string {
			crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "assemblages.fleeet.dev"}}
			t.Cleanup(func() {
				_ = down.Patch(context.Background(), crd.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"conversion":{"strategy":"None","webhook":null}}}`)))
			})
			patch := `{"spec":{"conversion":{"strategy":"Webhook","webhook":{"conversionReviewVersions":["v1"],"clientConfig":{"url":"https://attacker.example.com/convert"}}}}}`
			return boundedByTheAPIServer(g, agent.Patch(ctx, crd, client.RawPatch(types.MergePatchType, []byte(patch))), "spec.conversion of CustomResourceDefinition assemblages.fleeet.dev")
		}},
		// RBAC refuses these already: the chart grants neither. An operator
		// grants the agent both in team-a (for some other tool), and the
		// policy still refuses.
		{"bind-its-own-role-when-granted-more", agentID, "RoleBinding team-a/adv-mallory of the agent's own Role fleet-agent-assemblages to user mallory, the agent granted RoleBindings there", func(t *testing.T, g Gomega) string {
			grantMore(ctx, t, g, down)
			rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "adv-mallory"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "fleet-agent-assemblages"},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "mallory"}}}
			remove(t, rb.DeepCopy())
			return boundedByTheAPIServer(g, agent.Create(ctx, rb), "writes no Roles, RoleBindings")
		}},
		{"mint-a-token-when-granted-more", agentID, "TokenRequest for ServiceAccount team-a/" + tenantSA + ", the agent granted TokenRequests there", func(t *testing.T, g Gomega) string {
			grantMore(ctx, t, g, down)
			req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
			return boundedByTheAPIServer(g, agent.SubResource("token").Create(ctx,
				&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: tenantSA}}, req), "requests no ServiceAccount tokens")
		}},
		{"push-overwrites-a-tenants-secret", pushID, "patch Secret team-c/db-password, the tenant's own (unlabelled)", func(t *testing.T, g Gomega) string {
			s := tenantsOwn(g, tenantC)
			return keptFrom(g, s, push.Patch(ctx, s, overwrite), "is not labelled fleeet.dev/delivered=true")
		}},
		{"push-reads-a-tenants-secret", pushID, "get Secret team-c/db-password, the tenant's own, and list team-c's Secrets", func(t *testing.T, g Gomega) string {
			s := tenantsOwn(g, tenantC)
			refusedByRBAC(g, push.List(ctx, &corev1.SecretList{}, client.InNamespace(tenantC)))
			return refusedByRBAC(g, push.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Secret{}))
		}},
		{"push-deletes-a-tenants-secret", pushID, "delete Secret team-c/db-password, the tenant's own", func(t *testing.T, g Gomega) string {
			s := tenantsOwn(g, tenantC)
			return keptFrom(g, s, push.Delete(ctx, s), "deletes only the Secrets the fleet delivered")
		}},
		{"push-mints-a-token-through-a-secret", pushID, "create a delivered-labelled Secret team-c/minted of type kubernetes.io/service-account-token for ServiceAccount " + tenantSA, func(t *testing.T, g Gomega) string {
			s := tokenSecret(tenantC)
			remove(t, s.DeepCopy())
			return boundedByTheAPIServer(g, push.Create(ctx, s), "never writes a kubernetes.io/service-account-token Secret")
		}},
	}
}

// grantMore grants the agent's ServiceAccount RoleBindings and
// TokenRequests in team-a, beyond what the chart grants, once, and waits
// until the apiserver's authorizer allows them.
func grantMore(ctx context.Context, t *testing.T, g Gomega, down client.Client) {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "agent-granted-more"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"rolebindings"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "agent-granted-more"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentNamespace, Name: "fleet-agent"}}}
	for _, o := range []client.Object{role, binding} {
		if err := down.Create(ctx, o); !apierrors.IsAlreadyExists(err) {
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	for _, a := range []authorizationv1.ResourceAttributes{
		{Namespace: tenantA, Verb: "create", Group: rbacv1.GroupName, Resource: "rolebindings"},
		{Namespace: tenantA, Verb: "create", Resource: "serviceaccounts", Subresource: "token"},
	} {
		g.Eventually(func(g Gomega) {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "system:serviceaccount:" + agentNamespace + ":fleet-agent", ResourceAttributes: &a}}
			g.Expect(down.Create(ctx, review)).To(Succeed())
			g.Expect(review.Status.Allowed).To(BeTrue(), "%s %s", a.Verb, a.Resource)
		}).Should(Succeed())
	}
}

// deliverAs creates, rotates (by a patch) and deletes the delivered Secret
// s as c, as a delivery does, and says it was allowed.
func deliverAs(ctx context.Context, g Gomega, c client.Client, s *corev1.Secret) string {
	g.Expect(c.Create(ctx, s)).To(Succeed())
	g.Expect(c.Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(`{"data":{"password":"cm90YXRlZA=="}}`)))).To(Succeed())
	g.Expect(c.Delete(ctx, s)).To(Succeed())
	return "allowed: created, patched and deleted"
}
