package fluximport

import (
	"context"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// pinned is the commit the GitRepos below are pinned to, so no test reads
// a git server.
const pinned = "0123456789abcdef0123456789abcdef01234567"

// fleetGitRepo is a GitRepo of namespace fleet-default reading paths at
// the commit pinned, with the targets given (YAML, or empty for none).
func fleetGitRepo(paths, targets string) string {
	return `apiVersion: fleet.cattle.io/v1alpha1
kind: GitRepo
metadata: {name: apps, namespace: fleet-default}
spec:
  repo: https://git.example.com/apps.git
  revision: ` + pinned + `
  paths: ` + paths + `
  helmSecretName: chart-creds
` + targets
}

// webBundle is a GitRepo with the targets given whose path web is a bundle
// of the fleet.yaml given.
func webBundle(targets, fleetYAML string) map[string]string {
	return map[string]string{"gitrepo.yaml": fleetGitRepo("[web]", targets), "web/fleet.yaml": fleetYAML}
}

// importFleet imports a directory of files.
func importFleet(t *testing.T, files map[string]string) ([]fleeetv1.Module, *Report) {
	t.Helper()
	dir := t.TempDir()
	testenv.WriteFiles(t, dir, files)
	modules, rep, err := Import(context.Background(), dir, Options{Namespace: "team-a", Selector: &metav1.LabelSelector{}, HTTP: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	return modules, rep
}

func TestAFleetHelmBundleBecomesAModuleWithAnOverridePerEnvironment(t *testing.T) {
	g := NewWithT(t)
	modules, rep := importFleet(t, map[string]string{
		"gitrepo.yaml": fleetGitRepo("[charts/web]", "  targets: [{name: linux, clusterSelector: {matchLabels: {os: linux}}}]\n"),
		"charts/web/fleet.yaml": `defaultNamespace: web
helm:
  repo: https://charts.example.com
  chart: hello
  version: 1.2.3
  releaseName: web
  values: {message: hi, ui: {color: blue}}
  valuesFiles: [values-common.yaml]
  atomic: true
targetCustomizations:
  - name: dev
    clusterSelector: {matchLabels: {env: dev}}
    helm: {values: {message: hi dev}}
  - name: prod
    clusterSelector: {matchLabels: {env: prod}}
    helm: {values: {replicaCount: 3}}
dependsOn: [{name: apps-infra}]
`,
		"charts/web/values-common.yaml": "replicaCount: 1\nui: {color: red, size: big}\n",
	})
	g.Expect(modules).To(HaveLen(1))
	m := modules[0]
	g.Expect(m.Name).To(Equal("apps-charts-web"), "Fleet's bundle name: the GitRepo's and the path's")
	g.Expect(m.Spec.Selector).To(Equal(&metav1.LabelSelector{MatchLabels: map[string]string{"os": "linux"}}))
	g.Expect(m.Spec.Sync.Source).To(Equal(fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "hello", Version: "1.2.3"},
		SecretRef: &fleeetv1.LocalObjectReference{Name: "chart-creds"}}))
	g.Expect(m.Spec.Sync.Secrets).To(Equal([]fleeetv1.SecretDelivery{{Name: "chart-creds"}}))
	h := m.Spec.Sync.Package.Helm
	g.Expect(h.ReleaseName).To(Equal("web"))
	g.Expect(h.TargetNamespace).To(Equal("web"))
	g.Expect(h.Chart).To(BeEmpty())
	g.Expect(string(h.Values.Raw)).To(MatchJSON(`{"message": "hi", "replicaCount": 1, "ui": {"color": "blue", "size": "big"}}`))
	g.Expect(m.Spec.Overrides).To(HaveLen(2))
	g.Expect(m.Spec.Overrides[0].Name).To(Equal("dev"))
	g.Expect(m.Spec.Overrides[0].Selector).To(Equal(metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}))
	g.Expect(string(m.Spec.Overrides[0].Helm.Values.Raw)).To(MatchJSON(`{"message": "hi dev"}`))
	g.Expect(string(m.Spec.Overrides[1].Helm.Values.Raw)).To(MatchJSON(`{"replicaCount": 3}`))
	g.Expect(m.Spec.Sync.DependsOn).To(Equal([]fleeetv1.Dependency{{Name: "apps-infra"}}))

	g.Expect(outcome(rep, "Bundle", "apps-charts-web")).To(And(HaveField("Outcome", Rewritten), HaveField("File", "charts/web/fleet.yaml"),
		HaveField("Namespace", "fleet-default"), HaveField("Module", "apps-charts-web"), HaveField("Notes", ConsistOf(
			"helm.atomic left out: the Module API has no such field",
			"helm.valuesFiles values-common.yaml merged into package.helm.values at import",
			"spec.dependsOn apps-infra: no Module of that name is imported; the Module waits until one exists",
		))))
	g.Expect(outcome(rep, "GitRepo", "apps")).To(And(HaveField("Outcome", Converted), HaveField("Module", "apps-charts-web")))
	g.Expect(rep.Counts).To(Equal(Counts{Converted: 1, Rewritten: 1, Modules: 1}), "values-common.yaml holds no object")
}

func TestAFleetKustomizeBundleBecomesAKustomizePathOfItsRepository(t *testing.T) {
	g := NewWithT(t)
	modules, rep := importFleet(t, map[string]string{
		"gitrepo.yaml":        fleetGitRepo("[apps]", "  targets: [{clusterSelector: {matchLabels: {env: prod}}}]\n"),
		"apps/web/fleet.yaml": "namespace: web\nkustomize: {dir: overlays/prod}\ndependsOn: [{name: apps-apps-db}]\n",
		"apps/web/overlays/prod/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: []\n",
		"apps/db/configmap.yaml":                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: db}\n",
		"apps/db/fleet.yaml":                        "defaultNamespace: data\n",
	})
	g.Expect(modules).To(HaveLen(2))
	byName := map[string]fleeetv1.Module{}
	for _, m := range modules {
		byName[m.Name] = m
		g.Expect(m.Spec.Sync.Source).To(Equal(fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/apps.git", Revision: pinned}}))
		g.Expect(m.Spec.Selector).To(Equal(&metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}))
	}
	g.Expect(byName["apps-apps-web"].Spec.Sync.Package.Kustomize).To(Equal(&fleeetv1.KustomizePackage{Path: "./apps/web/overlays/prod", TargetNamespace: "web"}))
	g.Expect(byName["apps-apps-web"].Spec.Sync.DependsOn).To(Equal([]fleeetv1.Dependency{{Name: "apps-apps-db"}}))
	g.Expect(byName["apps-apps-db"].Spec.Sync.Package.Kustomize).To(Equal(&fleeetv1.KustomizePackage{Path: "./apps/db", TargetNamespace: "data"}))
	g.Expect(outcome(rep, "Bundle", "apps-apps-web")).To(And(HaveField("Outcome", Converted), HaveField("Notes", BeEmpty())))
	g.Expect(outcome(rep, "Bundle", "apps-apps-db").Notes).To(ConsistOf(ContainSubstring("defaultNamespace data: package.kustomize.targetNamespace sets every")))
	g.Expect(outcome(rep, "GitRepo", "apps")).To(HaveField("Module", "apps-apps-db, apps-apps-web"))
}

func TestAFleetCustomizationOfTheKustomizeDirBecomesAPathOverride(t *testing.T) {
	g := NewWithT(t)
	modules, rep := importFleet(t, webBundle("  targets: [{clusterSelector: {}}]\n",
		"kustomize: {dir: overlays/dev}\ntargetCustomizations:\n"+
			"  - name: prod\n    clusterSelector: {matchLabels: {env: prod}}\n    kustomize: {dir: overlays/prod}\n"+
			"  - name: staging\n    clusterSelector: {matchLabels: {env: staging}}\n    kustomize: {dir: overlays/staging}\n"))
	g.Expect(modules).To(HaveLen(1))
	g.Expect(modules[0].Spec.Sync.Package.Kustomize.Path).To(Equal("./web/overlays/dev"))
	g.Expect(modules[0].Spec.Overrides).To(Equal([]fleeetv1.Override{
		{Name: "prod", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			Kustomize: &fleeetv1.KustomizeOverride{Path: "./web/overlays/prod"}},
		{Name: "staging", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "staging"}},
			Kustomize: &fleeetv1.KustomizeOverride{Path: "./web/overlays/staging"}},
	}))
	g.Expect(outcome(rep, "Bundle", "apps-web").Outcome).NotTo(Equal(NotConverted))
}

// Fleet deploys a GitRepo's bundles to every cluster any of its targets
// matches: targets that differ in one label's value (and agree on the
// rest) are one selector, that label In those values.
func TestFleetTargetsOnOneLabelsValuesBecomeOneSelector(t *testing.T) {
	g := NewWithT(t)
	modules, rep := importFleet(t, webBundle("  targets:\n"+
		"  - {name: dev, clusterSelector: {matchLabels: {env: dev, os: linux}}}\n"+
		"  - {name: prod, clusterSelector: {matchLabels: {env: prod, os: linux}}}\n"+
		"  - {name: staging, clusterSelector: {matchLabels: {env: staging, os: linux}}}\n", "namespace: web\n"))
	g.Expect(modules).To(HaveLen(1))
	g.Expect(modules[0].Spec.Selector).To(Equal(&metav1.LabelSelector{MatchLabels: map[string]string{"os": "linux"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"dev", "prod", "staging"}}}}))
	g.Expect(outcome(rep, "Bundle", "apps-web")).To(And(HaveField("Outcome", Rewritten),
		HaveField("Notes", ContainElement(ContainSubstring("GitRepo fleet-default/apps spec.targets: 3 targets, one selector: env in (dev, prod, staging)")))))
}

func TestFleetInputTheModuleCannotSayIsReportedPerBundle(t *testing.T) {
	linux := "  targets: [{clusterSelector: {matchLabels: {os: linux}}}]\n"
	for name, tc := range map[string]struct {
		files   map[string]string
		bundle  string
		outcome Outcome
		note    string
	}{
		"a customization that changes the kustomize dir of a chart": {
			files:  webBundle(linux, "helm: {repo: https://charts.example.com, chart: hello, version: 1.2.3}\ntargetCustomizations:\n  - name: prod\n    clusterSelector: {matchLabels: {env: prod}}\n    kustomize: {dir: overlays/prod}\n"),
			bundle: "apps-web", outcome: NotConverted,
			note: "targetCustomizations[0] (prod).kustomize: a kustomize dir for a bundle that is a Helm chart",
		},
		"a customization's kustomize dir outside the repository": {
			files:  webBundle(linux, "kustomize: {dir: base}\ntargetCustomizations:\n  - name: prod\n    clusterSelector: {matchLabels: {env: prod}}\n    kustomize: {dir: ../../../etc}\n"),
			bundle: "apps-web", outcome: NotConverted,
			note: "targetCustomizations[0] (prod).kustomize.dir ../../../etc: outside the repository",
		},
		"a customization that changes the chart's version": {
			files:  webBundle(linux, "helm: {repo: https://charts.example.com, chart: hello, version: 1.2.3}\ntargetCustomizations:\n  - name: canary\n    clusterSelector: {matchLabels: {ring: canary}}\n    helm: {version: 1.3.0}\n"),
			bundle: "apps-web", outcome: NotConverted,
			note: "targetCustomizations[0] (canary).helm.version: the Module API has no override that changes the chart's version",
		},
		"customizations that may match the same cluster": {
			files: webBundle(linux, "helm: {repo: https://charts.example.com, chart: hello, version: 1.2.3}\ntargetCustomizations:\n"+
				"  - {name: eu, clusterSelector: {matchLabels: {region: eu}}, helm: {values: {a: 1}}}\n"+
				"  - {name: prod, clusterSelector: {matchLabels: {env: prod}}, helm: {values: {a: 2}}}\n"),
			bundle: "apps-web", outcome: NotConverted,
			note: "targetCustomizations[1] (prod): its clusterSelector and eu's may pick the same cluster",
		},
		"a GitRepo targeting a cluster group": {
			files:  webBundle("  targets: [{clusterGroup: prod}]\n", "namespace: web\n"),
			bundle: "apps-web", outcome: NotConverted,
			note: "GitRepo fleet-default/apps spec.targets[0].clusterGroup: fleeet has no cluster groups",
		},
		"a GitRepo with targets on two labels": {
			files:  webBundle("  targets: [{clusterSelector: {matchLabels: {env: dev}}}, {clusterSelector: {matchLabels: {region: eu}}}]\n", "namespace: web\n"),
			bundle: "apps-web", outcome: NotConverted,
			note: "GitRepo fleet-default/apps spec.targets: 2 targets whose clusterSelectors are not one label's values",
		},
		"a GitRepo with a target by expression among others": {
			files: webBundle("  targets: [{clusterSelector: {matchLabels: {env: dev}}}, {clusterSelector: {matchExpressions: [{key: env, operator: In, values: [prod]}]}}]\n",
				"namespace: web\n"),
			bundle: "apps-web", outcome: NotConverted,
			note: "GitRepo fleet-default/apps spec.targets: 2 targets whose clusterSelectors are not one label's values",
		},
		"a GitRepo with a target without clusterSelector": {
			files:  webBundle("  targets: [{clusterSelector: {matchLabels: {env: dev}}}, {name: all}]\n", "namespace: web\n"),
			bundle: "apps-web", outcome: NotConverted,
			note: "GitRepo fleet-default/apps spec.targets[1]: no clusterSelector",
		},
		"a GitRepo without targets": {
			files:  webBundle("", "namespace: web\n"),
			bundle: "apps-web", outcome: Rewritten,
			note: "GitRepo fleet-default/apps spec.targets: none, so Fleet deploys to its cluster group default",
		},
		"a path of raw manifests": {
			files:  map[string]string{"gitrepo.yaml": fleetGitRepo("[manifests]", linux), "manifests/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"},
			bundle: "apps-manifests", outcome: Converted,
		},
		"a path holding nothing": {
			files:  map[string]string{"gitrepo.yaml": fleetGitRepo("[missing]", linux)},
			bundle: "apps-missing", outcome: NotConverted,
			note: "spec.paths: missing holds no fleet.yaml and no manifests in the directory",
		},
		"a git bundle without a GitRepo": {
			files:  map[string]string{"web/fleet.yaml": "namespace: web\n"},
			bundle: "web", outcome: NotConverted,
			note: "no GitRepo of the directory has web under its paths",
		},
		"a chart of a repository without a GitRepo": {
			files:  map[string]string{"web/fleet.yaml": "helm: {repo: https://charts.example.com, chart: hello, version: 1.2.3}\n"},
			bundle: "web", outcome: Converted,
		},
		"namespaceLabels": {
			files:  webBundle(linux, "namespace: web\nnamespaceLabels: {team: a}\n"),
			bundle: "apps-web", outcome: NotConverted, note: "fleet.yaml.namespaceLabels: the Module API has no such field",
		},
		"dependsOn by selector": {
			files:  webBundle(linux, "dependsOn: [{selector: {matchLabels: {tier: db}}}]\n"),
			bundle: "apps-web", outcome: NotConverted, note: "dependsOn[0].selector: a Module depends on Modules by name",
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			modules, rep := importFleet(t, tc.files)
			got := outcome(rep, "Bundle", tc.bundle)
			g.Expect(got.Outcome).To(Equal(tc.outcome), "%+v", rep.Objects)
			if tc.note != "" {
				g.Expect(got.Notes).To(ContainElement(ContainSubstring(tc.note)))
			}
			if tc.outcome == NotConverted {
				g.Expect(modules).To(BeEmpty())
			} else {
				g.Expect(modules).To(HaveLen(1))
			}
		})
	}
}

func TestAFleetChartByPathIsAChartOfTheGitSource(t *testing.T) {
	g := NewWithT(t)
	modules, _ := importFleet(t, map[string]string{
		"gitrepo.yaml":                fleetGitRepo("[charts]", "  targets: [{clusterSelector: {}}]\n"),
		"charts/app/fleet.yaml":       "helm: {chart: ./chart, values: {a: 1}}\n",
		"charts/app/chart/Chart.yaml": "apiVersion: v2\nname: app\nversion: 0.1.0\n",
		"charts/own/fleet.yaml":       "helm: {releaseName: own}\n",
		"charts/own/Chart.yaml":       "apiVersion: v2\nname: own\nversion: 0.1.0\n",
	})
	g.Expect(modules).To(HaveLen(2))
	g.Expect(modules[0].Spec.Sync.Source.Git).To(Equal(&fleeetv1.GitSource{URL: "https://git.example.com/apps.git", Revision: pinned}))
	g.Expect(modules[0].Spec.Sync.Package.Helm.Chart).To(Equal("charts/app/chart"))
	g.Expect(modules[1].Spec.Sync.Package.Helm.Chart).To(Equal("charts/own"), "a bundle that is a chart")
	g.Expect(modules[1].Spec.Selector).To(Equal(&metav1.LabelSelector{}))
}

// A GitRepo's paths may be globs, as Fleet reads them: each directory a
// glob matches is a path of its own, and a glob matching none is reported.
func TestFleetPathGlobsNameEachDirectoryTheyMatch(t *testing.T) {
	g := NewWithT(t)
	modules, rep := importFleet(t, map[string]string{
		"gitrepo.yaml":           fleetGitRepo(`["apps/*", "infra/*/base", "none/*"]`, ""),
		"apps/web/fleet.yaml":    "namespace: web\n",
		"apps/web/svc.yaml":      "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n",
		"apps/db/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: db}\n",
		"infra/dns/base/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dns}\n",
		"infra/dns/prod/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dns-prod}\n",
		"other/cm.yaml":          "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n",
	})
	paths := map[string]string{}
	for _, m := range modules {
		paths[m.Name] = m.Spec.Sync.Package.Kustomize.Path
	}
	g.Expect(paths).To(Equal(map[string]string{"apps-apps-db": "./apps/db", "apps-apps-web": "./apps/web", "apps-infra-dns-base": "./infra/dns/base"}))
	g.Expect(outcome(rep, "Bundle", "apps-none")).To(And(HaveField("Outcome", NotConverted),
		HaveField("Notes", ConsistOf(ContainSubstring("none/* holds no fleet.yaml and no manifests")))))
}
