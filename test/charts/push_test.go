package charts_test

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"helm.sh/helm/v3/pkg/release"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/manager"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// The agent chart in push mode gives the fleet-manager's kubeconfig exactly
// what the push path uses: the manager delivers a plan and then a new
// version of it, and a Secret it delivers, rotates and replaces, through a
// kubeconfig of the chart's push ServiceAccount, the
// downstream apiserver refuses it nothing, and its audit log shows every
// permission the chart grants that ServiceAccount in use. The agent, run as
// the chart's ServiceAccount with the chart's push-mode arguments, is refused
// nothing either.
func TestAgentChartInPushModeGrantsTheManagerExactlyWhatItPushes(t *testing.T) {
	g := testenv.Assertions(t)
	ctx := t.Context()
	audit := filepath.Join(t.TempDir(), "downstream.log")
	mgmt := testenv.StartCluster(t, "management", testenv.WithWebhooks())
	down := testenv.StartCluster(t, "downstream", testenv.WithoutFleeetCRDs(), testenv.WithAuditLog(audit))
	testenv.StartFlux(t, down, testenv.SourceController, testenv.KustomizeController)

	g.Expect(mgmt.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}})).To(Succeed())
	g.Expect(mgmt.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: tenant, Labels: map[string]string{fleeetv1.TenantLabel: "true"},
		Annotations: map[string]string{"fleeet.dev/allow-insecure-http": "true"},
	}})).To(Succeed())
	testenv.RunManager(t, mgmt, "fleet-manager", func(ctx context.Context, mgr ctrl.Manager) error {
		return manager.Setup(ctx, mgr, manager.Options{
			OfflineGrace: time.Minute, PushTimeout: 5 * time.Second, PushPoll: time.Second,
			Management: credential.Management{URL: mgmt.Config.Host, CABundle: mgmt.Config.CAData},
			Namespace:  managerNamespace,
		})
	})

	// The default tenant role, admin, is an aggregated ClusterRole whose
	// rules only kube-controller-manager fills in; none runs here.
	g.Expect(down.Client.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-apps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}},
	})).To(Succeed())
	agentRelease := testenv.ChartOf(t, "fleet-agent").Install(t, testenv.HelmFor(t, down, agentNamespace), "fleet-agent", agentNamespace, map[string]any{
		"mode":                 "push",
		"management":           map[string]any{"namespace": tenant},
		"clusterName":          "edge",
		"tenantServiceAccount": map[string]any{"clusterRole": "tenant-apps"},
	})
	agent := testenv.RunRelease(t, down, agentRelease, testenv.BuildCommand(t, "fleet-agent", testenv.TestVersion), nil)

	// The Remote's kubeconfig authenticates as the chart's push
	// ServiceAccount. (Its token Secret stays empty here: no
	// kube-controller-manager fills it in; a token of the same
	// ServiceAccount from the TokenRequest API carries the same rights.)
	const pusher = "fleet-agent-push"
	kubeconfig := testenv.Kubeconfig(t, clientcmdapi.Cluster{Server: down.Config.Host, CertificateAuthorityData: down.Config.CAData},
		clientcmdapi.AuthInfo{Token: testenv.ServiceAccountToken(t, down, agentNamespace, pusher)})
	g.Expect(mgmt.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "edge-kubeconfig"},
		Data: map[string][]byte{"value": kubeconfig}})).To(Succeed())
	g.Expect(mgmt.Client.Create(ctx, &fleeetv1.Remote{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "edge", Labels: map[string]string{"env": "edge"}},
		Spec: fleeetv1.RemoteSpec{KubeconfigRef: &fleeetv1.SecretKeyReference{Name: "edge-kubeconfig", Key: "value"},
			ServiceAccountName: "fleeet-tenant"},
	})).To(Succeed())

	git := testenv.NewGitServer(t)
	app := func(version string) string {
		url, _ := git.Commit(t, "app", map[string]string{
			"deploy/kustomization.yaml": "resources: [configmap.yaml]\n",
			"deploy/configmap.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  version: " + version + "\n",
		}, version)
		return url
	}
	module := &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "app"},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "edge"}},
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: app("v1.0.0"), Tag: "v1.0.0"}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy", TargetNamespace: tenant}},
				Secrets: []fleeetv1.SecretDelivery{{Name: "app-config"}},
			},
		}},
	}
	offer := func(typ corev1.SecretType, value string) {
		g.Expect(mgmt.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "app-config", Labels: map[string]string{fleeetv1.DeliverableLabel: "true"}},
			Type:       typ, Data: map[string][]byte{"value": []byte(value)},
		})).To(Succeed())
	}
	offer(corev1.SecretTypeOpaque, "one")
	g.Expect(mgmt.Client.Create(ctx, module)).To(Succeed())
	logs := func() string { return "agent:\n" + testenv.Tail(agent.LogPath, 30) }
	// A new version makes the manager update the Assemblage it created.
	for _, version := range []string{"v1.0.0", "v2.0.0"} {
		if version != "v1.0.0" {
			app(version)
			g.Expect(testenv.Change(ctx, mgmt.Client, module, func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = version })).To(Succeed())
		}
		g.Eventually(func(g Gomega) {
			cm := &corev1.ConfigMap{}
			g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "app"}, cm)).To(Succeed())
			g.Expect(cm.Data).To(HaveKeyWithValue("version", version))
			g.Expect(mgmt.Client.Get(ctx, client.ObjectKeyFromObject(module), module)).To(Succeed())
			g.Expect(module.Status.Summary).To(Equal(fleeetv1.ModuleSummary{Total: 1, Updated: 1, Ready: 1}))
			remote := &fleeetv1.Remote{}
			g.Expect(mgmt.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "edge"}, remote)).To(Succeed())
			connected := apimeta.FindStatusCondition(remote.Status.Conditions, fleeetv1.ConnectedCondition)
			g.Expect(connected).NotTo(BeNil())
			g.Expect(connected.Reason).To(Equal(fleeetv1.ReasonPushed), connected.Message)
		}, 3*timeout, poll).Should(Succeed(), logs)
	}
	// The delivered Secret is pushed, rotated in place, and replaced when
	// its type changes (a Secret's type cannot be updated).
	delivered := func(typ corev1.SecretType, value string) {
		g.Eventually(func(g Gomega) {
			s := &corev1.Secret{}
			g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "app-config"}, s)).To(Succeed())
			g.Expect(s.Type).To(Equal(typ))
			g.Expect(string(s.Data["value"])).To(Equal(value))
		}, 3*timeout, poll).Should(Succeed(), logs)
	}
	delivered(corev1.SecretTypeOpaque, "one")
	offered := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "app-config"}}
	g.Expect(testenv.Change(ctx, mgmt.Client, offered, func(s *corev1.Secret) { s.Data["value"] = []byte("two") })).To(Succeed())
	delivered(corev1.SecretTypeOpaque, "two")
	g.Expect(mgmt.Client.Delete(ctx, offered)).To(Succeed())
	offer("fleeet.dev/app-config", "three")
	delivered("fleeet.dev/app-config", "three")

	ks := &kustomizev1.KustomizationList{}
	g.Expect(down.Client.List(ctx, ks, client.InNamespace(tenant))).To(Succeed())
	g.Expect(ks.Items).To(HaveLen(1))
	g.Expect(ks.Items[0].Spec.ServiceAccountName).To(Equal("fleeet-tenant"), "Flux impersonates the chart's tenant ServiceAccount")

	pushUser := "system:serviceaccount:" + agentNamespace + ":" + pusher
	used, refused := permissionsUsed(t, audit, pushUser)
	t.Logf("%s used: %s", pushUser, strings.Join(used, ", "))
	g.Expect(refused).To(BeEmpty(), "requests refused to the push identity")
	granted := grantedTo(t, agentRelease, agentNamespace, pusher)
	g.Expect(granted).To(ConsistOf("get fleeet.dev/assemblages", "create fleeet.dev/assemblages", "update fleeet.dev/assemblages",
		"patch fleeet.dev/assemblages", "delete fleeet.dev/assemblages", "get apiextensions.k8s.io/customresourcedefinitions",
		"create secrets", "patch secrets", "delete secrets"))
	// Deleting an Assemblage removes a further part of a split plan that
	// the plan no longer lists; this fleet's one-Module plan never splits
	// (internal/mirror's tests delete such a part).
	usable := slices.DeleteFunc(slices.Clone(granted), func(p string) bool { return p == "delete fleeet.dev/assemblages" })
	g.Expect(used).To(ContainElements(usable), "every other permission the chart grants the push identity is used")
	agentUser := "system:serviceaccount:" + agentNamespace + ":fleet-agent"
	_, refused = permissionsUsed(t, audit, agentUser)
	g.Expect(refused).To(BeEmpty(), "requests refused to the push-only agent")
}

// grantedTo lists what the release's RBAC lets ServiceAccount namespace/name
// do, as "verb group/resource" the way permissionsUsed names requests. A
// binding to a role the release does not hold fails the test: its rules
// cannot be seen used.
func grantedTo(t *testing.T, rel *release.Release, namespace, name string) []string {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{}
	var bindings []string
	for _, o := range testenv.Objects(t, rel) {
		switch o.GetKind() {
		case "Role", "ClusterRole":
			role := &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role); err != nil {
				t.Fatal(err)
			}
			roles[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = role.Rules
		case "RoleBinding", "ClusterRoleBinding":
			b := &rbacv1.RoleBinding{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, b); err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(b.Subjects, isServiceAccount(namespace, name)) {
				continue
			}
			ns := b.Namespace
			if b.RoleRef.Kind == "ClusterRole" {
				ns = ""
			}
			bindings = append(bindings, b.RoleRef.Kind+" "+ns+"/"+b.RoleRef.Name)
		}
	}
	seen := map[string]bool{}
	for _, role := range bindings {
		rules, ok := roles[role]
		if !ok {
			t.Fatalf("%s/%s is bound to %s, which the release does not hold", namespace, name, role)
		}
		for _, rule := range rules {
			for _, group := range rule.APIGroups {
				for _, resource := range rule.Resources {
					for _, verb := range rule.Verbs {
						seen[verb+" "+strings.TrimPrefix(group+"/"+resource, "/")] = true
					}
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

func isServiceAccount(namespace, name string) func(rbacv1.Subject) bool {
	return func(s rbacv1.Subject) bool {
		return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == namespace && s.Name == name
	}
}
