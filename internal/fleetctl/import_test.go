package fleetctl_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetctl"
	"github.com/fleeet-dev/fleeet/internal/fluximport"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// fluxCheckout writes a Flux repository as `flux bootstrap` lays one out:
// a cluster's Kustomizations under clusters/production applying the
// infrastructure/ and apps/ paths, one GitRepository following a branch and
// one a semver range of tags of a real git server, and HelmReleases of a
// real Helm repository at an exact version, at a range and with valuesFrom,
// and one deploying to another cluster. It returns the checkout and the
// commit the branch holds.
func fluxCheckout(t *testing.T) (dir, branchHead string) {
	t.Helper()
	git := testenv.NewGitServer(t)
	git.Commit(t, "fleet", map[string]string{"infrastructure/namespace.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: web}\n"}, "")
	fleetURL, branchHead := git.Commit(t, "fleet", map[string]string{"infrastructure/README.md": "the branch moved on\n"}, "")
	var appsURL string
	for _, tag := range []string{"v1.0.0", "v1.1.0", "v2.0.0"} {
		appsURL, _ = git.Commit(t, "apps", map[string]string{"apps/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greeting}\ndata: {version: " + tag + "}\n"}, tag)
	}
	charts := testenv.NewChartRepo(t, testenv.ChartDir("hello"))

	dir = t.TempDir()
	testenv.WriteFiles(t, dir, map[string]string{
		"clusters/production/infrastructure.yaml": `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: fleet, namespace: flux-system}
spec: {interval: 1m, url: ` + fleetURL + `, ref: {branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: infrastructure, namespace: flux-system}
spec: {interval: 10m, sourceRef: {kind: GitRepository, name: fleet}, path: ./infrastructure, prune: true}
`,
		"clusters/production/apps.yaml": `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: apps, namespace: flux-system}
spec: {interval: 5m, url: ` + appsURL + `, ref: {semver: ">=1.0.0 <2.0.0"}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: flux-system}
spec:
  interval: 10m
  dependsOn: [{name: infrastructure}]
  sourceRef: {kind: GitRepository, name: apps}
  path: ./apps
  prune: true
  targetNamespace: web
  postBuild: {substitute: {GREETING: hello}}
`,
		"clusters/production/releases.yaml": `apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {name: charts, namespace: flux-system}
spec: {interval: 1h, url: ` + charts.URL + `}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: hello, namespace: flux-system}
spec:
  interval: 10m
  dependsOn: [{name: infrastructure}]
  chart: {spec: {chart: hello, version: 1.2.3, sourceRef: {kind: HelmRepository, name: charts}}}
  releaseName: hello
  targetNamespace: web
  values: {message: hi}
---
apiVersion: helm.toolkit.fluxcd.io/v2beta2
kind: HelmRelease
metadata: {name: hello-latest, namespace: flux-system}
spec:
  chart: {spec: {chart: hello, version: ">=1.0.0 <2.0.0", sourceRef: {kind: HelmRepository, name: charts}}}
  targetNamespace: web
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: hello-tuned, namespace: flux-system}
spec:
  chart: {spec: {chart: hello, version: 1.2.3, sourceRef: {kind: HelmRepository, name: charts}}}
  targetNamespace: web
  valuesFrom: [{kind: ConfigMap, name: hello-values}, {kind: Secret, name: hello-secrets, valuesKey: prod.yaml}]
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: hello-edge, namespace: flux-system}
spec:
  chart: {spec: {chart: hello, version: 1.2.3, sourceRef: {kind: HelmRepository, name: charts}}}
  kubeConfig: {secretRef: {name: edge-kubeconfig}}
`,
		"infrastructure/namespace.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: web}\n",
		"apps/kustomization.yaml":       "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [configmap.yaml]\n",
		"apps/configmap.yaml":           "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greeting}\n",
	})
	return dir, branchHead
}

// runImport runs fleetctl import, returning stdout and stderr apart.
func runImport(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := fleetctl.NewCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"import"}, args...))
	err = cmd.ExecuteContext(t.Context())
	return out.String(), errOut.String(), err
}

// importTenant is a tenant namespace whose Modules may deploy to namespace
// web and read the test's git and Helm servers, plain http on loopback.
func importTenant(t *testing.T, g Gomega) string {
	t.Helper()
	ns := cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	patch := []byte(`{"metadata":{"annotations":{"fleeet.dev/allow-insecure-http":"true","fleeet.dev/target-namespaces":"web"}}}`)
	g.Expect(cluster.Client.Patch(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	return ns
}

func TestImportTurnsAFluxRepositoryIntoModulesAdmissionAdmits(t *testing.T) {
	g := NewWithT(t)
	dir, branchHead := fluxCheckout(t)
	ns := importTenant(t, g)

	stdout, stderr, err := runImport(t, dir, "--namespace", ns)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	modules := importedModules(g, stdout)
	for _, m := range modules {
		g.Expect(m.Namespace).To(Equal(ns))
		g.Expect(m.Spec.Selector).To(Equal(&metav1.LabelSelector{}), "{} selects every Remote")
	}
	g.Expect(modules).To(HaveLen(5), stdout)
	g.Expect(stdout).NotTo(ContainSubstring("status"))

	infra := modules["infrastructure"].Spec
	g.Expect(infra.Sync.Source.Git.URL).To(HaveSuffix("/fleet.git"))
	g.Expect(infra.Sync.Source.Git.Revision).To(Equal(branchHead), "the branch's head, pinned")
	g.Expect(infra.Sync.Source.Git.Tag).To(BeEmpty())
	g.Expect(infra.Sync.Package.Kustomize).To(Equal(&fleeetv1.KustomizePackage{Path: "./infrastructure", Prune: ptr.To(true)}))
	g.Expect(infra.Sync.Interval.Duration.String()).To(Equal("10m0s"))
	g.Expect(infra.VersionPolicy).To(BeNil())

	apps := modules["apps"].Spec
	g.Expect(apps.Sync.Source.Git.Tag).To(Equal("v1.1.0"), "the highest tag in the range")
	g.Expect(apps.Sync.Source.Git.URL).To(HaveSuffix("/apps.git"))
	g.Expect(apps.VersionPolicy).To(Equal(&fleeetv1.VersionPolicy{Semver: ">=1.0.0 <2.0.0"}))
	g.Expect(apps.Sync.DependsOn).To(Equal([]fleeetv1.Dependency{{Name: "infrastructure"}}))
	g.Expect(apps.Sync.Package.Kustomize).To(Equal(&fleeetv1.KustomizePackage{Path: "./apps", Prune: ptr.To(true), TargetNamespace: "web",
		Substitute: map[string]string{"GREETING": "hello"}}))

	hello := modules["hello"].Spec
	g.Expect(hello.Sync.Source.Helm.URL).To(HavePrefix("http://127.0.0.1:"))
	g.Expect(hello.Sync.Source.Helm.Chart).To(Equal("hello"))
	g.Expect(hello.Sync.Source.Helm.Version).To(Equal("1.2.3"))
	g.Expect(hello.VersionPolicy).To(BeNil())
	g.Expect(hello.Sync.DependsOn).To(Equal([]fleeetv1.Dependency{{Name: "infrastructure"}}))
	g.Expect(hello.Sync.Package.Helm.ReleaseName).To(Equal("hello"))
	g.Expect(hello.Sync.Package.Helm.TargetNamespace).To(Equal("web"))
	g.Expect(string(hello.Sync.Package.Helm.Values.Raw)).To(MatchJSON(`{"message": "hi"}`))

	latest := modules["hello-latest"].Spec
	g.Expect(latest.Sync.Source.Helm.Version).To(Equal("1.2.3"))
	g.Expect(latest.VersionPolicy).To(Equal(&fleeetv1.VersionPolicy{Semver: ">=1.0.0 <2.0.0"}))

	tuned := modules["hello-tuned"].Spec
	g.Expect(tuned.Sync.Package.Helm.ValuesFrom).To(Equal([]fleeetv1.ValuesReference{
		{Kind: "ConfigMap", Name: "hello-values"}, {Kind: "Secret", Name: "hello-secrets", ValuesKey: "prod.yaml"}}))
	g.Expect(tuned.Sync.Secrets).To(Equal([]fleeetv1.SecretDelivery{{Name: "hello-secrets"}}))

	g.Expect(strings.Split(strings.TrimSpace(stderr), "\n")).To(Equal([]string{
		"ConfigMap greeting (apps/configmap.yaml): not converted: v1 ConfigMap is not a Flux object the import converts",
		"Kustomization (apps/kustomization.yaml): not converted: kustomize.config.k8s.io/v1beta1 Kustomization is not a Flux object the import converts",
		`Kustomization flux-system/apps (clusters/production/apps.yaml): converted with rewrites → Module apps: ` +
			`GitRepository flux-system/apps spec.ref.semver ">=1.0.0 <2.0.0" resolved to v1.1.0 at import; spec.versionPolicy.semver keeps the range`,
		"Kustomization flux-system/infrastructure (clusters/production/infrastructure.yaml): converted with rewrites → Module infrastructure: " +
			"branch main pinned to " + branchHead + " at import",
		"HelmRelease flux-system/hello (clusters/production/releases.yaml): converted → Module hello",
		`HelmRelease flux-system/hello-latest (clusters/production/releases.yaml): converted with rewrites → Module hello-latest: ` +
			`spec.chart.spec.version ">=1.0.0 <2.0.0" resolved to 1.2.3 at import; spec.versionPolicy.semver keeps the range`,
		"HelmRelease flux-system/hello-tuned (clusters/production/releases.yaml): converted with rewrites → Module hello-tuned: " +
			"spec.valuesFrom ConfigMap hello-values: read in the tenant namespace of each cluster, where it must exist; " +
			"spec.valuesFrom Secret hello-secrets: delivered from the tenant namespace (spec.sync.secrets)",
		"HelmRelease flux-system/hello-edge (clusters/production/releases.yaml): not converted: " +
			"spec.kubeConfig: fleeet reaches a cluster through its Remote, not a kubeconfig",
		"Namespace web (infrastructure/namespace.yaml): not converted: v1 Namespace is not a Flux object the import converts",
		"GitRepository flux-system/apps (clusters/production/apps.yaml): converted → Module apps",
		"GitRepository flux-system/fleet (clusters/production/infrastructure.yaml): converted → Module infrastructure",
		"HelmRepository flux-system/charts (clusters/production/releases.yaml): converted → Module hello, hello-latest, hello-tuned",
		"Secret hello-secrets (Modules hello-tuned): copy it into namespace " + ns + " on the management cluster and label it fleeet.dev/deliverable=true",
		"5 Modules in namespace " + ns + ", selecting Remotes by {} (every Remote); 4 converted, 4 converted with rewrites, 4 not converted (3 of other kinds)",
	}))

	// -o json reports the same as JSON, --out writes a file a Module, and
	// --apply creates each: admission, with the manager's webhooks and
	// policies, takes every one as it is.
	out := t.TempDir()
	stdout, stderr, err = runImport(t, "--kubeconfig", cluster.Kubeconfig, dir, "--namespace", ns, "--selector", "env=prod", "--out", out, "-o", "json", "--apply")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(stdout).To(BeEmpty())
	report := importReport(g, stderr)
	g.Expect(report.Counts).To(Equal(fluximport.Counts{Converted: 4, Rewritten: 4, NotConverted: 4, OtherKinds: 3, Modules: 5}))
	g.Expect(report.Selector).To(Equal("env=prod"))
	g.Expect(report.Applied).To(ConsistOf(fluximport.Applied{Module: "apps"}, fluximport.Applied{Module: "infrastructure"},
		fluximport.Applied{Module: "hello"}, fluximport.Applied{Module: "hello-latest"}, fluximport.Applied{Module: "hello-tuned"}))
	files, _ := filepath.Glob(filepath.Join(out, "*.yaml"))
	g.Expect(files).To(HaveLen(5))
	for name, want := range modules {
		written, err := os.ReadFile(filepath.Join(out, name+".yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		m := &fleeetv1.Module{}
		g.Expect(yaml.UnmarshalStrict(written, m)).To(Succeed())
		g.Expect(m.Spec.Selector).To(Equal(&metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}))
		created := &fleeetv1.Module{}
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, created)).To(Succeed())
		// The apiserver fills in defaults; what the import says is kept.
		g.Expect(created.Spec.Sync.Source).To(Equal(want.Spec.Sync.Source), name)
		g.Expect(created.Spec.Sync.DependsOn).To(Equal(want.Spec.Sync.DependsOn), name)
		g.Expect(created.Spec.VersionPolicy != nil).To(Equal(want.Spec.VersionPolicy != nil), name)
	}

	// A tenant namespace that does not allow plain http refuses them all,
	// naming why; the command fails.
	strict := cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	_, stderr, err = runImport(t, "--kubeconfig", cluster.Kubeconfig, dir, "--namespace", strict, "--apply", "-o", "json")
	g.Expect(err).To(MatchError("5 of 5 Modules refused, listed in the report"))
	g.Expect(importReport(g, stderr).Applied).To(HaveEach(HaveField("Refusal", ContainSubstring("fleeet.dev/allow-insecure-http"))))
}

// importedModules decodes fleetctl import's stdout, a Module a document,
// by name.
func importedModules(g Gomega, stdout string) map[string]*fleeetv1.Module {
	modules := map[string]*fleeetv1.Module{}
	for _, doc := range strings.Split(stdout, "---\n")[1:] {
		m := &fleeetv1.Module{}
		g.Expect(yaml.UnmarshalStrict([]byte(doc), m)).To(Succeed(), doc)
		modules[m.Name] = m
	}
	return modules
}

// importReport decodes fleetctl import -o json's report.
func importReport(g Gomega, stderr string) fluximport.Report {
	var report fluximport.Report
	g.Expect(json.Unmarshal([]byte(stderr), &report)).To(Succeed(), stderr)
	return report
}

// fleetCheckout writes a Rancher Fleet repository: a GitRepo following
// branch main of a real git server, whose path fleet holds a bundle of a
// chart of a real Helm repository with values per environment and a
// bundle of a kustomize overlay depending on it. It returns the checkout
// and the commit the branch holds.
func fleetCheckout(t *testing.T) (dir, branchHead string) {
	t.Helper()
	charts := testenv.NewChartRepo(t, testenv.ChartDir("hello"))
	bundles := map[string]string{
		"fleet/hello/fleet.yaml": `defaultNamespace: web
helm:
  repo: ` + charts.URL + `
  chart: hello
  version: 1.2.3
  releaseName: hello
  values: {message: hi}
targetCustomizations:
  - {name: dev, clusterSelector: {matchLabels: {env: dev}}, helm: {values: {message: hi dev}}}
  - {name: prod, clusterSelector: {matchLabels: {env: prod}}, helm: {values: {message: hi prod}}}
`,
		"fleet/web/fleet.yaml":                       "namespace: web\nkustomize: {dir: overlays/prod}\ndependsOn: [{name: apps-fleet-hello}]\n",
		"fleet/web/base/kustomization.yaml":          "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [configmap.yaml]\n",
		"fleet/web/base/configmap.yaml":              "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greeting}\n",
		"fleet/web/overlays/prod/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\n",
	}
	url, branchHead := testenv.NewGitServer(t).Commit(t, "apps", bundles, "")
	bundles["gitrepo.yaml"] = `apiVersion: fleet.cattle.io/v1alpha1
kind: GitRepo
metadata: {name: apps, namespace: fleet-default}
spec:
  repo: ` + url + `
  branch: main
  paths: [fleet]
  targets: [{name: edge, clusterSelector: {matchLabels: {tier: edge}}}]
`
	dir = t.TempDir()
	testenv.WriteFiles(t, dir, bundles)
	return dir, branchHead
}

func TestImportTurnsARancherFleetRepositoryIntoModulesAdmissionAdmits(t *testing.T) {
	g := NewWithT(t)
	dir, branchHead := fleetCheckout(t)
	ns := importTenant(t, g)

	stdout, stderr, err := runImport(t, "--kubeconfig", cluster.Kubeconfig, dir, "--namespace", ns, "--apply")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(strings.Split(strings.TrimSpace(stderr), "\n")).To(Equal([]string{
		"ConfigMap greeting (fleet/web/base/configmap.yaml): not converted: v1 ConfigMap is not a Flux object the import converts",
		"Kustomization (fleet/web/base/kustomization.yaml): not converted: kustomize.config.k8s.io/v1beta1 Kustomization is not a Flux object the import converts",
		"Kustomization (fleet/web/overlays/prod/kustomization.yaml): not converted: kustomize.config.k8s.io/v1beta1 Kustomization is not a Flux object the import converts",
		"Bundle fleet-default/apps-fleet-hello (fleet/hello/fleet.yaml): converted → Module apps-fleet-hello",
		"Bundle fleet-default/apps-fleet-web (fleet/web/fleet.yaml): converted with rewrites → Module apps-fleet-web: branch main pinned to " + branchHead + " at import",
		"GitRepo fleet-default/apps (gitrepo.yaml): converted → Module apps-fleet-hello, apps-fleet-web",
		"Module " + ns + "/apps-fleet-hello created",
		"Module " + ns + "/apps-fleet-web created",
		"2 Modules in namespace " + ns + ", selecting Remotes by {} (every Remote); 2 converted, 1 converted with rewrites, 3 not converted (3 of other kinds)",
	}))
	modules := map[string]*fleeetv1.Module{}
	for _, m := range importedModules(g, stdout) {
		g.Expect(m.Spec.Selector).To(Equal(&metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}), "the GitRepo's target")
		created := &fleeetv1.Module{}
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: m.Name}, created)).To(Succeed())
		g.Expect(created.Spec.Sync.Source).To(Equal(m.Spec.Sync.Source), m.Name)
		g.Expect(created.Spec.Overrides).To(HaveLen(len(m.Spec.Overrides)), m.Name)
		modules[m.Name] = created
	}
	g.Expect(modules).To(HaveLen(2), stdout)

	hello := modules["apps-fleet-hello"].Spec
	g.Expect(hello.Sync.Source.Helm.Chart).To(Equal("hello"))
	g.Expect(hello.Sync.Source.Helm.Version).To(Equal("1.2.3"))
	g.Expect(hello.Sync.Package.Helm.TargetNamespace).To(Equal("web"))
	g.Expect(string(hello.Sync.Package.Helm.Values.Raw)).To(MatchJSON(`{"message": "hi"}`))
	g.Expect(hello.Overrides).To(HaveLen(2))
	g.Expect(hello.Overrides[1].Name).To(Equal("prod"))
	g.Expect(hello.Overrides[1].Selector.MatchLabels).To(Equal(map[string]string{"env": "prod"}))
	g.Expect(string(hello.Overrides[1].Helm.Values.Raw)).To(MatchJSON(`{"message": "hi prod"}`))

	web := modules["apps-fleet-web"].Spec
	g.Expect(web.Sync.Source.Git.URL).To(HaveSuffix("/apps.git"))
	g.Expect(web.Sync.Source.Git.Revision).To(Equal(branchHead), "the branch's head, pinned")
	g.Expect(web.Sync.Package.Kustomize.Path).To(Equal("./fleet/web/overlays/prod"))
	g.Expect(web.Sync.Package.Kustomize.TargetNamespace).To(Equal("web"))
	g.Expect(web.Sync.DependsOn).To(HaveExactElements(HaveField("Name", "apps-fleet-hello")))
}
