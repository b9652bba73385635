package fluximport

import (
	"cmp"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// gitRepo is a GitRepository at a tag, with a Secret for its credentials.
const gitRepo = `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: app, namespace: flux-system}
spec:
  interval: 1m
  url: https://git.example.com/app.git
  ref: {tag: v1.2.0}
  secretRef: {name: git-creds}
`

const helmRepo = `apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {name: charts, namespace: flux-system}
spec: {url: https://charts.example.com}
`

// kustomization is a Kustomization apps of namespace flux-system.
func kustomization(spec string) string {
	return "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: apps, namespace: flux-system}\nspec: " + spec
}

// helmRelease is a HelmRelease web of namespace flux-system.
func helmRelease(spec string) string {
	return "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: web, namespace: flux-system}\nspec: " + spec
}

// importOne imports a directory holding one file of docs.
func importOne(t *testing.T, docs ...string) ([]fleeetv1.Module, *Report) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "flux.yaml"), []byte(strings.Join(docs, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	modules, rep, err := Import(context.Background(), dir, Options{Namespace: "team-a", Selector: &metav1.LabelSelector{}, HTTP: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	return modules, rep
}

// outcome is the report on one object.
func outcome(rep *Report, kind, name string) ObjectReport {
	for _, o := range rep.Objects {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	return ObjectReport{}
}

func TestAKustomizationOfATagIsConvertedFieldByField(t *testing.T) {
	g := NewWithT(t)
	modules, rep := importOne(t, gitRepo, `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: flux-system}
spec:
  interval: 10m
  retryInterval: 2m
  sourceRef: {kind: GitRepository, name: app}
  path: ./apps
  prune: true
  targetNamespace: web
  timeout: 3m
  dependsOn: [{name: infrastructure, readyExpr: 'dep.status.lastAppliedRevision != ""'}]
  postBuild:
    substitute: {CLUSTER: prod}
  patches:
    - patch: '[{"op": "replace", "path": "/spec/replicas", "value": 2}]'
      target: {kind: Deployment, name: web}
  images: [{name: web, newTag: "1.1"}]
  healthChecks: [{apiVersion: apps/v1, kind: Deployment, name: db, namespace: data}]
`, `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: infrastructure, namespace: flux-system}
spec: {interval: 10m, sourceRef: {kind: GitRepository, name: app}, path: ./infrastructure, prune: true}
`)
	g.Expect(modules).To(HaveLen(2))
	m := modules[0]
	g.Expect(m.Name).To(Equal("apps"))
	g.Expect(m.Namespace).To(Equal("team-a"))
	g.Expect(m.Spec.Selector).To(Equal(&metav1.LabelSelector{}))
	g.Expect(m.Spec.VersionPolicy).To(BeNil())
	s := m.Spec.Sync
	g.Expect(s.Source).To(Equal(fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.2.0"},
		SecretRef: &fleeetv1.LocalObjectReference{Name: "git-creds"}}))
	g.Expect(s.Secrets).To(Equal([]fleeetv1.SecretDelivery{{Name: "git-creds"}}))
	g.Expect(s.DependsOn).To(Equal([]fleeetv1.Dependency{{Name: "infrastructure", ReadyExpr: `dep.status.lastAppliedRevision != ""`}}))
	g.Expect(s.Interval.Duration.String()).To(Equal("10m0s"))
	g.Expect(s.RetryInterval.Duration.String()).To(Equal("2m0s"))
	k := s.Package.Kustomize
	g.Expect(k.Path).To(Equal("./apps"))
	g.Expect(k.TargetNamespace).To(Equal("web"))
	g.Expect(k.Prune).To(Equal(ptr.To(true)))
	g.Expect(k.Wait).To(Equal(ptr.To(false)), "Flux's default, which healthChecks need")
	g.Expect(k.Timeout.Duration.String()).To(Equal("3m0s"))
	g.Expect(k.Substitute).To(Equal(map[string]string{"CLUSTER": "prod"}))
	g.Expect(k.Patches).To(Equal([]fleeetv1.KustomizePatch{{Patch: `[{"op": "replace", "path": "/spec/replicas", "value": 2}]`,
		Target: &fleeetv1.PatchTarget{Kind: "Deployment", Name: "web"}}}))
	g.Expect(k.Images).To(Equal([]fleeetv1.KustomizeImage{{Name: "web", NewTag: "1.1"}}))
	g.Expect(k.HealthChecks).To(Equal([]fleeetv1.HealthCheckReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "db", Namespace: "data"}}))

	g.Expect(outcome(rep, "Kustomization", "apps")).To(And(HaveField("Outcome", Converted), HaveField("Module", "apps"), HaveField("Notes", BeEmpty())))
	g.Expect(outcome(rep, "GitRepository", "app")).To(And(HaveField("Outcome", Converted), HaveField("Module", "apps, infrastructure")))
	g.Expect(rep.Secrets).To(Equal([]SecretUse{{Name: "git-creds", Modules: []string{"apps", "infrastructure"}}}))
	g.Expect(rep.Counts).To(Equal(Counts{Converted: 3, Modules: 2}))
}

func TestFieldsTheModuleCannotSayAreReportedPerObject(t *testing.T) {
	for name, tc := range map[string]struct {
		docs    []string
		kind    string
		name    string // apps for a Kustomization, web for others, unless set
		outcome Outcome
		note    string
	}{
		"serviceAccountName is left out": {
			docs: []string{gitRepo, kustomization(`{sourceRef: {kind: GitRepository, name: app}, serviceAccountName: flux-apps}`)},
			kind: "Kustomization", outcome: Rewritten, note: "spec.serviceAccountName left out: fleeet applies every sync as the tenant's ServiceAccount",
		},
		"kubeConfig targets another cluster": {
			docs: []string{gitRepo, kustomization(`{sourceRef: {kind: GitRepository, name: app}, kubeConfig: {secretRef: {name: remote}}}`)},
			kind: "Kustomization", outcome: NotConverted, note: "spec.kubeConfig: fleeet reaches a cluster through its Remote",
		},
		"an unknown field is not guessed at": {
			docs: []string{gitRepo, kustomization(`{sourceRef: {kind: GitRepository, name: app}, futureField: true}`)},
			kind: "Kustomization", outcome: NotConverted, note: "spec.futureField: not a field the import knows",
		},
		"a source missing from the directory": {
			docs: []string{kustomization(`{sourceRef: {kind: GitRepository, name: elsewhere}}`)},
			kind: "Kustomization", outcome: NotConverted, note: "spec.sourceRef: GitRepository flux-system/elsewhere is not in the directory",
		},
		"a Bucket source": {
			docs: []string{kustomization(`{sourceRef: {kind: Bucket, name: b}}`)},
			kind: "Kustomization", outcome: NotConverted, note: "spec.sourceRef: a Bucket source cannot be converted",
		},
		"a source of another namespace is inlined": {
			docs: []string{gitRepo, `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: team-a}
spec: {sourceRef: {kind: GitRepository, name: app, namespace: flux-system}}`},
			kind: "Kustomization", outcome: Rewritten, note: "GitRepository flux-system/app of another namespace is inlined",
		},
		"a source's include": {
			docs: []string{strings.Replace(gitRepo, "spec:\n", "spec:\n  include: [{repository: {name: other}}]\n", 1), kustomization(`{sourceRef: {kind: GitRepository, name: app}}`)},
			kind: "Kustomization", outcome: NotConverted, note: "GitRepository flux-system/app spec.include: the Module API has no such field",
		},
		"a short commit": {
			docs: []string{strings.Replace(gitRepo, "{tag: v1.2.0}", "{commit: abc123}", 1), kustomization(`{sourceRef: {kind: GitRepository, name: app}}`)},
			kind: "Kustomization", outcome: NotConverted, note: "spec.ref.commit abc123: a Module pins a full 40-hex commit",
		},
		"a private branch cannot be read": {
			docs: []string{strings.Replace(gitRepo, "{tag: v1.2.0}", "{branch: main}", 1), kustomization(`{sourceRef: {kind: GitRepository, name: app}}`)},
			kind: "Kustomization", outcome: NotConverted, note: "spec.ref.branch main: the import cannot read the branch's commit: the manager reads public sources only",
		},
		"a range of a private OCI repository": {
			docs: []string{`apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: OCIRepository
metadata: {name: manifests, namespace: flux-system}
spec: {url: oci://ghcr.io/org/manifests, ref: {semver: ">=1.0.0"}, secretRef: {name: ghcr}}`, kustomization(`{sourceRef: {kind: OCIRepository, name: manifests}}`)},
			kind: "Kustomization", outcome: NotConverted, note: `spec.ref.semver ">=1.0.0": the range cannot be resolved: the manager reads public sources only`,
		},
		"a range of a private oci:// Helm repository": {
			docs: []string{`apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {name: charts, namespace: flux-system}
spec: {type: oci, url: oci://ghcr.io/org/charts, secretRef: {name: ghcr}}`, helmRelease(`{chart: {spec: {chart: web, version: "1.x", sourceRef: {kind: HelmRepository, name: charts}}}}`)},
			kind: "HelmRelease", outcome: NotConverted, note: `spec.chart.spec.version "1.x": the range cannot be resolved: the manager reads public sources only`,
		},
		"valuesFiles": {
			docs: []string{helmRepo, helmRelease(`{chart: {spec: {chart: web, version: 1.0.0, valuesFiles: [prod.yaml], sourceRef: {kind: HelmRepository, name: charts}}}}`)},
			kind: "HelmRelease", outcome: NotConverted, note: "spec.chart.spec.valuesFiles: the Module API has no such field",
		},
		"a dependency that is not imported": {
			docs: []string{helmRepo, helmRelease(`{dependsOn: [{name: cert-manager}], chart: {spec: {chart: web, version: 1.0.0, sourceRef: {kind: HelmRepository, name: charts}}}}`)},
			kind: "HelmRelease", outcome: Rewritten, note: "spec.dependsOn cert-manager: no Module of that name is imported",
		},
		"a readyExpr reading the dependent": {
			docs: []string{gitRepo, kustomization(`{sourceRef: {kind: GitRepository, name: app}, dependsOn: [{name: infra, readyExpr: "dep.status.ready && self.status.ready"}]}`)},
			kind: "Kustomization", outcome: NotConverted, note: "spec.dependsOn infra readyExpr: fleeet declares dep only, not Flux's self: ERROR: <input>:1:21: undeclared reference to 'self'",
		},
		"an interval shorter than a Module takes": {
			docs: []string{gitRepo, kustomization(`{sourceRef: {kind: GitRepository, name: app}, interval: 30s}`)},
			kind: "Kustomization", outcome: Rewritten, note: "spec.interval 30s raised to 1m0s, the least a Module takes",
		},
		"a name that is not a DNS label": {
			docs: []string{helmRepo, strings.Replace(helmRelease(`{chart: {spec: {chart: web, version: 1.0.0, sourceRef: {kind: HelmRepository, name: charts}}}}`), "name: web,", "name: web.prod,", 1)},
			kind: "HelmRelease", name: "web.prod", outcome: NotConverted, note: "metadata.name web.prod: a Module's name names its sync downstream, a DNS label",
		},
		"another kind": {
			docs: []string{`apiVersion: apps/v1
kind: Deployment
metadata: {name: web}`},
			kind: "Deployment", outcome: NotConverted, note: "apps/v1 Deployment is not a Flux object the import converts",
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, rep := importOne(t, tc.docs...)
			o := outcome(rep, tc.kind, cmp.Or(tc.name, map[string]string{"Kustomization": "apps"}[tc.kind], "web"))
			g.Expect(o.Outcome).To(Equal(tc.outcome), "%v", o.Notes)
			g.Expect(o.Notes).To(ContainElement(ContainSubstring(tc.note)))
		})
	}
}

func TestAHelmReleaseWithValuesFromDeliversItsSecrets(t *testing.T) {
	g := NewWithT(t)
	modules, rep := importOne(t, helmRepo, `apiVersion: helm.toolkit.fluxcd.io/v2beta2
kind: HelmRelease
metadata: {name: web, namespace: flux-system}
spec:
  interval: 5m
  releaseName: web-prod
  targetNamespace: web
  chart: {spec: {chart: web, version: 1.4.2, sourceRef: {kind: HelmRepository, name: charts}}}
  values: {replicaCount: 2}
  valuesFrom:
    - {kind: ConfigMap, name: web-values}
    - {kind: Secret, name: web-secrets, valuesKey: prod.yaml}
  install: {crds: CreateReplace, remediation: {retries: 5}}
  upgrade: {remediation: {retries: 2, strategy: Uninstall}}
  driftDetection: {mode: Warn}
`)
	g.Expect(modules).To(HaveLen(1))
	s := modules[0].Spec.Sync
	g.Expect(s.Source.Helm).To(Equal(&fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "web", Version: "1.4.2"}))
	h := s.Package.Helm
	g.Expect(h.ReleaseName).To(Equal("web-prod"))
	g.Expect(h.TargetNamespace).To(Equal("web"))
	g.Expect(string(h.Values.Raw)).To(MatchJSON(`{"replicaCount": 2}`))
	g.Expect(h.ValuesFrom).To(Equal([]fleeetv1.ValuesReference{{Kind: "ConfigMap", Name: "web-values"}, {Kind: "Secret", Name: "web-secrets", ValuesKey: "prod.yaml"}}))
	g.Expect(h.CRDs).To(Equal(fleeetv1.CRDsCreateReplace))
	g.Expect(h.Remediation).To(Equal(&fleeetv1.HelmRemediation{InstallRetries: ptr.To[int32](5), UpgradeRetries: ptr.To[int32](2), Strategy: fleeetv1.UninstallRemediation}))
	g.Expect(h.DriftDetection).To(Equal(&fleeetv1.HelmDriftDetection{Mode: fleeetv1.DriftWarn}))
	g.Expect(s.Secrets).To(Equal([]fleeetv1.SecretDelivery{{Name: "web-secrets"}}))
	g.Expect(outcome(rep, "HelmRelease", "web")).To(And(HaveField("Outcome", Rewritten), HaveField("Notes", Equal([]string{
		"spec.valuesFrom ConfigMap web-values: read in the tenant namespace of each cluster, where it must exist",
		"spec.valuesFrom Secret web-secrets: delivered from the tenant namespace (spec.sync.secrets)",
	}))))
}

func TestAModuleNameIsImportedOnce(t *testing.T) {
	g := NewWithT(t)
	ks := `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: %s}
spec: {sourceRef: {kind: GitRepository, name: app, namespace: flux-system}}
`
	modules, rep := importOne(t, gitRepo, strings.Replace(ks, "%s", "flux-system", 1), strings.Replace(ks, "%s", "team-b", 1))
	g.Expect(modules).To(HaveLen(1))
	g.Expect(rep.Objects).To(ContainElement(And(HaveField("Namespace", "team-b"), HaveField("Outcome", NotConverted),
		HaveField("Notes", ContainElement("metadata.name: Module apps is already imported from Kustomization flux-system/apps")))))
}

// An OCI range, of an artifact and of a chart in an oci:// Helm repository,
// is resolved against a real public registry to its highest tag now and
// kept as the Module's version policy.
func TestAnOCIRangeIsResolvedToItsHighestTag(t *testing.T) {
	g := NewWithT(t)
	reg := testenv.NewPublicRegistry(t)
	for _, tag := range []string{"1.0.0", "1.3.0", "2.0.0"} {
		reg.PushKustomize(t, "org/manifests", tag, map[string]string{"cm.yaml": "kind: ConfigMap"})
	}
	charts, version, _ := reg.PushChart(t, "org/charts", testenv.ChartDir("hello"))
	charts = strings.TrimSuffix(charts, "/hello")
	dir := t.TempDir()
	docs := []string{`apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: OCIRepository
metadata: {name: manifests, namespace: flux-system}
spec: {url: oci://` + reg.Host + `/org/manifests, ref: {semver: "^1.0.0"}}`, kustomization(`{sourceRef: {kind: OCIRepository, name: manifests}}`),
		`apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {name: charts, namespace: flux-system}
spec: {type: oci, url: ` + charts + `}`, helmRelease(`{chart: {spec: {chart: hello, version: "*", sourceRef: {kind: HelmRepository, name: charts}}}}`)}
	g.Expect(os.WriteFile(filepath.Join(dir, "flux.yaml"), []byte(strings.Join(docs, "\n---\n")), 0o644)).To(Succeed())
	modules, rep, err := Import(t.Context(), dir, Options{Namespace: "team-a", Selector: &metav1.LabelSelector{}, HTTP: &http.Client{Transport: reg.Transport()}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(modules).To(HaveLen(2))
	byName := map[string]fleeetv1.Module{}
	for _, m := range modules {
		byName[m.Name] = m
	}
	apps, web := byName["apps"], byName["web"]
	g.Expect(apps.Spec.Sync.Source.OCI.Tag).To(Equal("1.3.0"))
	g.Expect(apps.Spec.VersionPolicy).To(Equal(&fleeetv1.VersionPolicy{Semver: "^1.0.0"}))
	g.Expect(web.Spec.Sync.Source.Helm.Version).To(Equal(version))
	g.Expect(web.Spec.VersionPolicy).To(Equal(&fleeetv1.VersionPolicy{Semver: "*"}))
	g.Expect(outcome(rep, "Kustomization", "apps").Notes).To(ContainElement(ContainSubstring(`resolved to 1.3.0 at import`)))
}

// A v1beta2 Kustomization's patchesStrategicMerge and patchesJson6902
// become entries of patches, as Flux v1 reads them.
func TestV1beta2PatchesBecomeEntriesOfPatches(t *testing.T) {
	g := NewWithT(t)
	modules, rep := importOne(t, gitRepo, `apiVersion: kustomize.toolkit.fluxcd.io/v1beta2
kind: Kustomization
metadata: {name: apps, namespace: flux-system}
spec:
  sourceRef: {kind: GitRepository, name: app}
  path: ./deploy
  patches:
    - patch: '{"spec":{"replicas":1}}'
      target: {kind: Deployment}
  patchesStrategicMerge:
    - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web}, spec: {replicas: 3}}
  patchesJson6902:
    - target: {group: apps, version: v1, kind: Deployment, name: web}
      patch: [{op: add, path: /metadata/labels/tier, value: front}]
`)
	g.Expect(modules).To(HaveLen(1))
	patches := modules[0].Spec.Sync.Package.Kustomize.Patches
	g.Expect(patches).To(HaveLen(3))
	g.Expect(patches[0]).To(Equal(fleeetv1.KustomizePatch{Patch: `{"spec":{"replicas":1}}`, Target: &fleeetv1.PatchTarget{Kind: "Deployment"}}))
	g.Expect(patches[1].Target).To(BeNil(), "a strategic merge patch names its object")
	g.Expect(patches[1].Patch).To(MatchJSON(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"replicas":3}}`))
	g.Expect(patches[2].Target).To(Equal(&fleeetv1.PatchTarget{Group: "apps", Version: "v1", Kind: "Deployment", Name: "web"}))
	g.Expect(patches[2].Patch).To(MatchJSON(`[{"op":"add","path":"/metadata/labels/tier","value":"front"}]`))
	o := outcome(rep, "Kustomization", "apps")
	g.Expect(o.Outcome).To(Equal(Rewritten))
	g.Expect(o.Notes).To(ContainElements(
		"spec.patchesStrategicMerge[0] is an entry of spec.patches, Flux v1's form",
		"spec.patchesJson6902[0] is an entry of spec.patches, Flux v1's form"))
}
