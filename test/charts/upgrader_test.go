package charts_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// TestUpgradingTenantMayUpgradeTheAgentAndNothingBeyond installs the agent
// chart, without Flux, with upgrade.tenant and the default (empty)
// upgrade.clusterRole, and upgrades it as that tenant's ServiceAccount:
// first with the helm CLI impersonating it (by user name only, as
// helm-controller does), with the values the chart left in the tenant's
// namespace and fleet-wide values on top, to a new chart version (so every
// object is patched, its labels changed) that also turns metrics
// authentication on (new ClusterRoles and a binding, new Deployment
// arguments); then through helm-controller, from the HelmRelease the agent
// would make of the tenant's Module. The apiserver's own RBAC, with its
// escalation checks, is the judge. The same upgrade is refused while the
// tenant holds only `view`, and the tenant, upgrading or writing directly,
// cannot reach beyond the agent: no Secret outside it, no cluster-admin, no
// ClusterRole of its own making, no namespace deleted.
func TestUpgradingTenantMayUpgradeTheAgentAndNothingBeyond(t *testing.T) {
	g := testenv.Assertions(t)
	ctx := t.Context()
	// Flux's CRDs come with the harness, as with a Flux installed otherwise.
	down := testenv.StartCluster(t, "downstream", testenv.WithoutFleeetCRDs())
	const upgraderUser = "system:serviceaccount:" + platform + ":fleeet-tenant"

	// The tenants' role: admin, the default, is an aggregated ClusterRole
	// that no controller fills here, and an empty role would let anyone
	// bind it.
	g.Expect(down.Client.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-apps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"*"}}},
	})).To(Succeed())
	kubeSystemSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap"},
		StringData: map[string]string{"key": "value"}}
	g.Expect(down.Client.Create(ctx, kubeSystemSecret)).To(Succeed())

	dir := t.TempDir()
	writeValues := func(name string, values map[string]any) string {
		data, err := yaml.Marshal(values)
		g.Expect(err).NotTo(HaveOccurred())
		path := filepath.Join(dir, name)
		g.Expect(os.WriteFile(path, data, 0o600)).To(Succeed())
		return path
	}
	installValues := map[string]any{
		"token":                "eyJhbGciOiJSUzI1NiJ9.e30.dGVhbS1h",
		"management":           map[string]any{"url": "https://management.example.com:6443", "namespace": tenant},
		"clusterName":          "edge",
		"tenants":              []any{map[string]any{"token": "eyJhbGciOiJSUzI1NiJ9.e30.cGxhdGZvcm0", "management": map[string]any{"namespace": platform}}},
		"tenantServiceAccount": map[string]any{"clusterRole": "tenant-apps"},
		"upgrade":              map[string]any{"tenant": platform, "clusterRole": "view"},
		"metrics":              map[string]any{"secure": false},
		"flux":                 map[string]any{"enabled": false},
	}
	chart := filepath.Join(testenv.RepoRoot, "charts", "fleet-agent")
	newChart := chartAtVersion(t, "0.2.0")
	install := func(role string) {
		installValues["upgrade"].(map[string]any)["clusterRole"] = role
		testenv.HelmCLI(t, down, "upgrade", "--install", "fleet-agent", chart, "--namespace", agentNamespace, "--create-namespace",
			"-f", writeValues("install.yaml", installValues))
	}
	// What the tenant's HelmRelease gives: valuesFrom the chart's ConfigMap,
	// then its own values; Flux stays the cluster's own.
	fleetValues := writeValues("fleet.yaml", map[string]any{
		"flux": map[string]any{"enabled": false}, "metrics": map[string]any{"secure": true}, "logLevel": "debug"})
	upgradeAsTenant := func(extra ...string) (string, error) {
		cm := &corev1.ConfigMap{}
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: platform, Name: "fleet-agent-values"}, cm)).To(Succeed())
		clusterValues := filepath.Join(dir, "cluster.yaml")
		g.Expect(os.WriteFile(clusterValues, []byte(cm.Data["values.yaml"]), 0o600)).To(Succeed())
		return testenv.TryHelmCLI(t, down, append([]string{"upgrade", "fleet-agent", newChart, "--namespace", agentNamespace,
			"-f", clusterValues, "-f", fleetValues, "--kube-as-user", upgraderUser}, extra...)...)
	}
	forbidden := `(?i)forbidden: User "` + regexp.QuoteMeta(upgraderUser) + `"`

	// With only view, as a ClusterRole the installer names, the tenant
	// cannot upgrade (it cannot even read Helm's history of the release).
	install("view")
	out, err := upgradeAsTenant()
	g.Expect(err).To(HaveOccurred(), "the upgrade as a tenant holding only view succeeded:\n%s", out)
	g.Expect(out).To(MatchRegexp(forbidden))

	// The installer moves to the default (the opt-in's binding goes, the
	// upgrader's roles come); the tenant's upgrade then goes through.
	install("")
	out, err = upgradeAsTenant()
	g.Expect(err).NotTo(HaveOccurred(), "the upgrade as the upgrading tenant failed:\n%s", out)
	const newLabel = "fleet-agent-0.2.0"
	var releases []struct{ Name, Chart, Status string }
	g.Expect(json.Unmarshal([]byte(testenv.HelmCLI(t, down, "list", "--namespace", agentNamespace, "-o", "json")), &releases)).To(Succeed())
	g.Expect(releases).To(ConsistOf(MatchFields(IgnoreExtras, Fields{"Name": Equal("fleet-agent"), "Chart": Equal(newLabel), "Status": Equal("deployed")})))
	deployment := &appsv1.Deployment{}
	g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "fleet-agent"}, deployment)).To(Succeed())
	g.Expect(deployment.Labels).To(HaveKeyWithValue("helm.sh/chart", newLabel))
	g.Expect(deployment.Spec.Template.Spec.Containers[0].Args).To(ContainElements("--metrics-secure=true", "--zap-log-level=debug"))
	// Written by the upgrade: the new ClusterRoles and binding, and the
	// other tenant's binding to the tenants' role (bind, in team-a only).
	for _, o := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-metrics-auth"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-metrics-reader"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-metrics-auth"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-crds"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "fleet-agent-tenant"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "fleet-agent-assemblages"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: "fleet-agent"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: "fleet-agent-upgrader"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-upgrader"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}},
	} {
		g.Expect(down.Client.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed(), "%T %s", o, o.GetName())
		g.Expect(o.GetLabels()).To(HaveKeyWithValue("helm.sh/chart", newLabel), "%T %s", o, o.GetName())
	}
	// The fleet's values carry no token: the token Secrets went.
	err = down.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "fleet-agent-" + tenant + "-token"}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "token Secret: %v", err)

	// Writing directly as the tenant's ServiceAccount (the same identity its
	// other syncs apply as): nothing beyond the agent.
	impersonated := rest.CopyConfig(down.Config)
	impersonated.Impersonate = rest.ImpersonationConfig{UserName: upgraderUser}
	upgrader, err := client.New(impersonated, client.Options{Scheme: testenv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	self := []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: platform, Name: "fleeet-tenant"}}
	clusterAdmin := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"}
	upgraderRole := &rbacv1.ClusterRole{}
	g.Expect(down.Client.Get(ctx, client.ObjectKey{Name: "fleet-agent-upgrader"}, upgraderRole)).To(Succeed())
	upgraderRole.Rules = append(upgraderRole.Rules, rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}})
	for what, err := range map[string]error{
		"read a Secret in kube-system": upgrader.Get(ctx, client.ObjectKeyFromObject(kubeSystemSecret), &corev1.Secret{}),
		"bind cluster-admin to itself": upgrader.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-escalated"}, RoleRef: clusterAdmin, Subjects: self}),
		"bind cluster-admin to itself in a tenant namespace": upgrader.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "fleet-agent-escalated"}, RoleRef: clusterAdmin, Subjects: self}),
		"create a ClusterRole granting everything": upgrader.Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-everything"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}),
		"widen its own ClusterRole": upgrader.Update(ctx, upgraderRole),
		"delete a tenant namespace": upgrader.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}),
	} {
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the upgrading tenant could %s: %v", what, err)
	}

	// The fleet's own path: the HelmRelease the agent makes of the tenant's
	// Module, which helm-controller runs as the tenant's ServiceAccount with
	// Helm 4, waiting for the Deployment (by its ReplicaSets) and the rest,
	// and then, before it reports Ready, comparing the release with the
	// cluster by a dry-run apply of every object (drift detection, on by
	// default). No kubelet, controller-manager or agent runs here: the test
	// reports the new Deployment rolled out and the Upstreams observed, as
	// they would.
	testenv.StartFlux(t, down, testenv.SourceController, testenv.HelmController)
	// The Deployment's ReplicaSet, as the deployment controller would make
	// it: the wait reads it, and would read its Pods, which the tenant may
	// not list, only to find failed ones sooner.
	g.Expect(down.Client.Get(ctx, client.ObjectKeyFromObject(deployment), deployment)).To(Succeed())
	g.Expect(down.Client.Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: "fleet-agent-1", Labels: deployment.Spec.Template.Labels},
		Spec:       appsv1.ReplicaSetSpec{Selector: deployment.Spec.Selector, Template: deployment.Spec.Template},
	})).To(Succeed())
	repo := testenv.NewChartRepo(t, chartAtVersion(t, "0.3.0"))
	values, err := json.Marshal(map[string]any{"flux": map[string]any{"enabled": false}, "logLevel": "error"})
	g.Expect(err).NotTo(HaveOccurred())
	x, err := flux.Expand(flux.Target{Owner: "edge", Namespace: platform, ServiceAccountName: "fleeet-tenant"}, &fleeetv1.NamedSync{
		Name: "fleet-agent",
		SyncSpec: fleeetv1.SyncSpec{
			Source: fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: repo.URL, Chart: "fleet-agent", Version: "0.3.0"}},
			Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{
				ReleaseName: "fleet-agent", TargetNamespace: agentNamespace, StorageNamespace: agentNamespace,
				ValuesFrom:  []fleeetv1.ValuesReference{{Kind: "ConfigMap", Name: "fleet-agent-values", ValuesKey: "values.yaml"}},
				Values:      &apiextensionsv1.JSON{Raw: values},
				Timeout:     &metav1.Duration{Duration: time.Minute},
				Remediation: &fleeetv1.HelmRemediation{UpgradeRetries: ptr.To[int32](0)},
				// helm-controller's default, Create, asks to create each CRD
				// of crds/, which the narrow roles do not allow; the agent
				// upgrades its own CRDs when it starts.
				CRDs: fleeetv1.CRDsSkip,
			}},
		},
	}, nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(down.Client.Create(ctx, x.Source)).To(Succeed())
	g.Expect(down.Client.Create(ctx, x.Applier)).To(Succeed())
	hr := x.Applier.(*helmv2.HelmRelease)
	g.Eventually(func(g Gomega) {
		settled(g, down, client.ObjectKey{Namespace: agentNamespace, Name: "fleet-agent"})
		g.Expect(down.Client.Get(ctx, client.ObjectKeyFromObject(hr), hr)).To(Succeed())
		ready := apimeta.FindStatusCondition(hr.Status.Conditions, "Ready")
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "HelmRelease: %s", ready.Message)
		g.Expect(hr.Status.History).NotTo(BeEmpty(), "HelmRelease: %s", ready.Message)
		g.Expect(hr.Status.History.Latest().ChartVersion).To(Equal("0.3.0"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(down.Client.Get(ctx, client.ObjectKeyFromObject(deployment), deployment)).To(Succeed())
	g.Expect(deployment.Labels).To(HaveKeyWithValue("helm.sh/chart", "fleet-agent-0.3.0"))
	g.Expect(deployment.Spec.Template.Spec.Containers[0].Args).To(ContainElements("--metrics-secure=true", "--zap-log-level=error"))

	// Nor can it opt itself into cluster-admin through an upgrade.
	out, err = upgradeAsTenant("--set", "upgrade.clusterRole=cluster-admin")
	g.Expect(err).To(HaveOccurred(), "the upgrading tenant bound itself to cluster-admin:\n%s", out)
	g.Expect(out).To(MatchRegexp(forbidden))
	err = down.Client.Get(ctx, client.ObjectKey{Name: "fleet-agent-upgrade"}, &rbacv1.ClusterRoleBinding{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ClusterRoleBinding fleet-agent-upgrade: %v", err)
}

// settled reports the Deployment key rolled out at its generation, as the
// deployment controller would once its pods are ready, and each Upstream
// beside it observed at its generation, as the agent would.
func settled(g Gomega, c *testenv.Cluster, key client.ObjectKey) {
	ctx := context.Background()
	d := &appsv1.Deployment{}
	g.Expect(c.Client.Get(ctx, key, d)).To(Succeed())
	if d.Status.ObservedGeneration != d.Generation {
		replicas := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
			},
		}
		g.Expect(c.Client.Status().Update(ctx, d)).To(Succeed())
	}
	upstreams := &fleeetv1.UpstreamList{}
	g.Expect(c.Client.List(ctx, upstreams, client.InNamespace(key.Namespace))).To(Succeed())
	for i := range upstreams.Items {
		u := &upstreams.Items[i]
		if u.Status.ObservedGeneration != u.Generation {
			u.Status.ObservedGeneration = u.Generation
			g.Expect(c.Client.Status().Update(ctx, u)).To(Succeed())
		}
	}
}

// chartAtVersion copies the agent chart with its version and appVersion set
// to version, as a release of the next build would be.
func chartAtVersion(t *testing.T, version string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fleet-agent")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(testenv.RepoRoot, "charts", "fleet-agent"))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "Chart.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = regexp.MustCompile(`(?m)^version: .*$`).ReplaceAll(data, []byte("version: "+version))
	data = regexp.MustCompile(`(?m)^appVersion: .*$`).ReplaceAll(data, []byte(`appVersion: "`+version+`"`))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}
