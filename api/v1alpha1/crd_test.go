package v1alpha1_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// One apiserver serves every test in this file; each test uses its own namespace.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, nil))
}

const commit = "0123456789abcdef0123456789abcdef01234567"

func gitSync() fleeetv1.SyncSpec {
	return fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/platform.git", Tag: "v1.0.0"}},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy"}},
	}
}

func helmSync() fleeetv1.SyncSpec {
	return fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "oci://registry.example.com/charts", Chart: "app", Version: "1.2.3"}},
		Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{}},
	}
}

// ociSource is an OCI artifact source at tag or digest.
func ociSource(tag, digest string) fleeetv1.Source {
	return fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: "oci://registry.example.com/platform", Tag: tag, Digest: digest}}
}

func minimalModule(ns string) *fleeetv1.Module {
	return &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Name: "platform", Namespace: ns},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Sync: gitSync(), Selector: &metav1.LabelSelector{},
		}},
	}
}

// minimalObjects holds one object of every kind with the least spec it accepts.
func minimalObjects(ns string) []client.Object {
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: ns} }
	return []client.Object{
		minimalModule(ns),
		&fleeetv1.BootstrapModule{ObjectMeta: meta("flux"), Spec: fleeetv1.BootstrapModuleSpec{
			SyncPlacement: fleeetv1.SyncPlacement{Sync: helmSync()},
		}},
		&fleeetv1.Remote{ObjectMeta: meta("edge-1")},
		&fleeetv1.ProxyAssemblage{ObjectMeta: meta("edge-1"), Spec: fleeetv1.ProxyAssemblageSpec{
			Assemblage: fleeetv1.AssemblageSpec{Syncs: []fleeetv1.NamedSync{{Name: "platform", SyncSpec: gitSync()}}},
		}},
		&fleeetv1.RegistrationToken{ObjectMeta: meta("edge")},
		&fleeetv1.Upstream{ObjectMeta: meta("team-a"), Spec: fleeetv1.UpstreamSpec{
			Management:  fleeetv1.ManagementEndpoint{URL: "https://management.example.com:6443", Namespace: "team-a"},
			ClusterName: "edge-1",
		}},
		&fleeetv1.Assemblage{ObjectMeta: meta("team-a")},
	}
}

func TestEveryKindAcceptsAMinimalSpecAndStartsUnobserved(t *testing.T) {
	ns := cluster.Namespace(t, "minimal", nil)
	for _, obj := range minimalObjects(ns) {
		t.Run(fmt.Sprintf("%T", obj), func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(cluster.Client.Create(t.Context(), obj)).To(Succeed())

			// kstatus must never read a fresh object as Current: observedGeneration
			// starts at -1 until a controller has looked at the object.
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(fleeetv1.GroupVersion.WithKind(kindOf(obj)))
			g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), u)).To(Succeed())
			observed, found, err := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(found).To(BeTrue(), "status.observedGeneration is defaulted")
			g.Expect(observed).To(Equal(int64(-1)))
		})
	}
}

// Every per-cluster option round-trips through the apiserver as written:
// the schema prunes none of it.
func TestPerClusterOptionsAreStoredAsWritten(t *testing.T) {
	g := NewWithT(t)
	ns := cluster.Namespace(t, "per-cluster", nil)
	kustomize := minimalModule(ns)
	k := kustomize.Spec.Sync.Package.Kustomize
	k.Patches = []fleeetv1.KustomizePatch{{Patch: "kind: Deployment", Target: &fleeetv1.PatchTarget{Kind: "Deployment", LabelSelector: "app=web"}}}
	k.Images = []fleeetv1.KustomizeImage{{Name: "web", NewTag: "2", Digest: "sha256:0123456789abcdef0123456789abcdef"}}
	k.Components = []string{"../ha"}
	k.SubstituteFrom = []fleeetv1.SubstituteReference{{Kind: "Secret", Name: "db", Optional: true}}
	kustomize.Spec.Overrides = []fleeetv1.Override{{Name: "eu", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}},
		Kustomize: &fleeetv1.KustomizeOverride{Path: "./overlays/eu", Patches: k.Patches, Images: k.Images, Substitute: map[string]string{"A": "b"}}}}
	helm := minimalModule(ns)
	helm.Name = "chart"
	helm.Spec.Sync = helmSync()
	helm.Spec.Sync.Package.Helm.ValuesFrom = []fleeetv1.ValuesReference{{Kind: "ConfigMap", Name: "v", ValuesKey: "k.yaml", TargetPath: "a.b[0]"}}
	helm.Spec.Overrides = []fleeetv1.Override{{Name: "eu", Helm: &fleeetv1.HelmOverride{Values: &apiextensionsv1.JSON{Raw: []byte(`{"a":{"b":null}}`)}}}}
	for _, m := range []*fleeetv1.Module{kustomize, helm} {
		g.Expect(cluster.Client.Create(t.Context(), m.DeepCopy())).To(Succeed())
		got := &fleeetv1.Module{}
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(m), got)).To(Succeed())
		g.Expect(got.Spec.Overrides).To(Equal(m.Spec.Overrides))
		if want := m.Spec.Sync.Package.Kustomize; want != nil {
			have := got.Spec.Sync.Package.Kustomize
			g.Expect([]any{have.Patches, have.Images, have.Components, have.SubstituteFrom}).To(
				Equal([]any{want.Patches, want.Images, want.Components, want.SubstituteFrom}))
		} else {
			g.Expect(got.Spec.Sync.Package.Helm.ValuesFrom).To(Equal(m.Spec.Sync.Package.Helm.ValuesFrom))
		}
	}
}

func TestDefaultsAreApplied(t *testing.T) {
	g := NewWithT(t)
	ns := cluster.Namespace(t, "defaults", nil)

	mod := minimalModule(ns)
	mod.Spec.Sync.Package.Kustomize.Path = ""
	g.Expect(cluster.Client.Create(t.Context(), mod)).To(Succeed())
	g.Expect(mod.Spec.Rollout.Strategy).To(Equal(fleeetv1.AllAtOnceStrategy))
	g.Expect(mod.Spec.Rollout.MaxUnavailable).To(Equal(ptr.To(intstr.FromInt32(1))))
	g.Expect(mod.Spec.Rollout.OnFailure).To(Equal(fleeetv1.PauseOnFailure))
	g.Expect(mod.Spec.Rollout.HistoryLimit).To(Equal(int32(5)))
	g.Expect(mod.Spec.Sync.Package.Kustomize.Path).To(Equal("./"))
	g.Expect(mod.Spec.Sync.Package.Kustomize.Prune).To(Equal(ptr.To(true)))
	g.Expect(mod.Spec.Sync.Package.Kustomize.Wait).To(Equal(ptr.To(true)), "a sync waits for its workloads unless told not to")

	tok := &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns}}
	g.Expect(cluster.Client.Create(t.Context(), tok)).To(Succeed())
	g.Expect(tok.Spec.TTL.Duration).To(Equal(time.Hour))
	g.Expect(tok.Spec.MaxRegistrations).To(Equal(int32(1)))

	remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Name: "push", Namespace: ns},
		Spec: fleeetv1.RemoteSpec{KubeconfigRef: &fleeetv1.SecretKeyReference{Name: "edge-kubeconfig"}}}
	g.Expect(cluster.Client.Create(t.Context(), remote)).To(Succeed())
	g.Expect(remote.Spec.KubeconfigRef.Key).To(Equal("value"))
}

// Every Flux option a sync may set is accepted when well formed, so the
// rejections below are about the values, not the fields.
func TestFluxOptionsAreAccepted(t *testing.T) {
	g := NewWithT(t)
	ns := cluster.Namespace(t, "options", nil)
	kustomize := minimalModule(ns)
	kustomize.Spec.Sync.Package.Kustomize = &fleeetv1.KustomizePackage{
		Wait:       ptr.To(false),
		Decryption: &fleeetv1.KustomizeDecryption{SecretRef: fleeetv1.LocalObjectReference{Name: "sops-age"}},
		Force:      ptr.To(true),
		HealthChecks: []fleeetv1.HealthCheckReference{
			{APIVersion: "helm.toolkit.fluxcd.io/v2", Kind: "HelmRelease", Name: "db", Namespace: "data"}},
		HealthCheckExprs: []fleeetv1.HealthCheckExpr{{APIVersion: "example.com/v1", Kind: "Widget", Current: "status.ready"}},
	}
	g.Expect(cluster.Client.Create(t.Context(), kustomize)).To(Succeed())

	helm := minimalModule(ns)
	helm.Name = "chart"
	helm.Spec.Sync = helmSync()
	helm.Spec.Sync.Package.Helm = &fleeetv1.HelmPackage{
		DriftDetection: &fleeetv1.HelmDriftDetection{Mode: fleeetv1.DriftWarn, Ignore: []fleeetv1.HelmDriftIgnoreRule{
			{Paths: []string{"/spec/replicas"}, Target: &fleeetv1.PatchTarget{Kind: "Deployment"}}}},
		CRDs: fleeetv1.CRDsCreateReplace, CreateNamespace: true,
		PostRenderers: []fleeetv1.KustomizePatch{{Patch: "[{\"op\": \"add\", \"path\": \"/metadata/labels/team\", \"value\": \"a\"}]",
			Target: &fleeetv1.PatchTarget{Kind: "Deployment"}}},
		Remediation: &fleeetv1.HelmRemediation{InstallRetries: ptr.To(int32(1)), UpgradeStrategy: &fleeetv1.HelmUpgradeStrategy{
			Name: fleeetv1.RetryOnFailure, RetryInterval: &metav1.Duration{Duration: time.Minute}}},
	}
	g.Expect(cluster.Client.Create(t.Context(), helm)).To(Succeed())
}

func TestInvalidObjectsAreRejectedNamingTheField(t *testing.T) {
	ns := cluster.Namespace(t, "invalid", nil)
	module := func(edit func(*fleeetv1.Module)) client.Object {
		m := minimalModule(ns)
		edit(m)
		return m
	}
	cases := []struct {
		name string
		obj  client.Object
		// raw edits the object as JSON, for fields the Go types cannot hold.
		raw  func(map[string]any)
		want []string
	}{{
		name: "git source with a branch",
		obj:  module(func(m *fleeetv1.Module) {}),
		raw: func(o map[string]any) {
			git := o["spec"].(map[string]any)["sync"].(map[string]any)["source"].(map[string]any)["git"].(map[string]any)
			delete(git, "tag")
			git["branch"] = "main"
		},
		want: []string{`unknown field "spec.sync.source.git.branch"`},
	}, {
		name: "git tag naming a branch ref",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "refs/heads/main" }),
		want: []string{"spec.sync.source.git.tag", "must name a tag, not a branch"},
	}, {
		name: "git source with neither tag nor revision",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "" }),
		want: []string{"spec.sync.source.git", "exactly one of tag or revision must be set"},
	}, {
		name: "git source with both tag and revision",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Revision = commit }),
		want: []string{"spec.sync.source.git", "exactly one of tag or revision must be set"},
	}, {
		name: "short commit",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Source.Git.Tag = ""
			m.Spec.Sync.Source.Git.Revision = commit[:7]
		}),
		want: []string{"spec.sync.source.git.revision", "full 40-character lower-case hex commit SHA"},
	}, {
		name: "helm chart with a version range",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync = helmSync(); m.Spec.Sync.Source.Helm.Version = ">=1.2.0" }),
		want: []string{"spec.sync.source.helm.version", "exact semantic version"},
	}, {
		name: "helm chart with a wildcard version",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync = helmSync(); m.Spec.Sync.Source.Helm.Version = "1.2.x" }),
		want: []string{"spec.sync.source.helm.version", "exact semantic version"},
	}, {
		name: "both git and helm sources",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Source.Helm = helmSync().Source.Helm }),
		want: []string{"spec.sync.source", "exactly one of git, helm or oci must be set"},
	}, {
		name: "neither git nor helm source",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Source.Git = nil
			m.Spec.Sync.Source.SecretRef = &fleeetv1.LocalObjectReference{Name: "creds"}
		}),
		want: []string{"spec.sync.source", "exactly one of git, helm or oci must be set"},
	}, {
		name: "no source",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Source = fleeetv1.Source{} }),
		want: []string{"spec.sync.source: Required value"},
	}, {
		name: "git source with a helm package naming no chart path",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Package = helmSync().Package }),
		want: []string{"spec.sync", "package.helm.chart must name the chart's path in the git source"},
	}, {
		name: "helm source with a kustomize package",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Source = helmSync().Source }),
		want: []string{"spec.sync", "a helm source is installed with a helm package"},
	}, {
		name: "chart path for a helm source",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync = helmSync(); m.Spec.Sync.Package.Helm.Chart = "charts/app" }),
		want: []string{"spec.sync", "package.helm.chart is only for a git source"},
	}, {
		name: "chart path leaving the repository",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Package = fleeetv1.Package{Helm: &fleeetv1.HelmPackage{Chart: "charts/../../etc"}}
		}),
		want: []string{"spec.sync.package.helm.chart", "must stay inside the repository"},
	}, {
		name: "ssh git source without credentials",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.URL = "ssh://git@git.example.com/platform.git" }),
		want: []string{"spec.sync.source", "an ssh:// git source needs secretRef", "the host key is always checked"},
	}, {
		name: "CA Secret for a git source",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Source.CertSecretRef = &fleeetv1.LocalObjectReference{Name: "ca"}
		}),
		want: []string{"spec.sync.source", "certSecretRef is for helm and oci sources"},
	}, {
		name: "oci source at latest",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Source = ociSource("latest", "") }),
		want: []string{"spec.sync.source.oci.tag", "latest moves"},
	}, {
		name: "oci source with neither tag nor digest",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Source = ociSource("", "") }),
		want: []string{"spec.sync.source.oci", "exactly one of tag or digest must be set"},
	}, {
		name: "oci source with a short digest",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Source = ociSource("", "sha256:abc") }),
		want: []string{"spec.sync.source.oci.digest", "64 lower-case hex"},
	}, {
		name: "oci URL carrying a tag",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Source = ociSource("1.0.0", "")
			m.Spec.Sync.Source.OCI.URL += ":1.0.0"
		}),
		want: []string{"spec.sync.source.oci.url", "must not carry a tag"},
	}, {
		name: "interval below a minute",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Interval = &metav1.Duration{Duration: 30 * time.Second} }),
		want: []string{"spec.sync.interval", "must be at least 1m"},
	}, {
		name: "retry interval below ten seconds",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.RetryInterval = &metav1.Duration{Duration: time.Second} }),
		want: []string{"spec.sync.retryInterval", "must be at least 10s"},
	}, {
		name: "both kustomize and helm packages",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Package.Helm = &fleeetv1.HelmPackage{} }),
		want: []string{"spec.sync.package", "exactly one of kustomize or helm must be set"},
	}, {
		name: "source URL with an unsupported scheme",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.URL = "file:///etc" }),
		want: []string{"spec.sync.source.git.url"},
	}, {
		name: "unknown helm remediation strategy",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync = helmSync()
			m.Spec.Sync.Package.Helm.Remediation = &fleeetv1.HelmRemediation{Strategy: "Ignore"}
		}),
		want: []string{"spec.sync.package.helm.remediation.strategy", `Unsupported value: "Ignore"`},
	}, {
		name: "unknown helm upgrade strategy",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync = helmSync()
			m.Spec.Sync.Package.Helm.Remediation = &fleeetv1.HelmRemediation{UpgradeStrategy: &fleeetv1.HelmUpgradeStrategy{Name: "Ignore"}}
		}),
		want: []string{"spec.sync.package.helm.remediation.upgradeStrategy.name", `Unsupported value: "Ignore"`},
	}, {
		name: "helm retry interval without RetryOnFailure",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync = helmSync()
			m.Spec.Sync.Package.Helm.Remediation = &fleeetv1.HelmRemediation{UpgradeStrategy: &fleeetv1.HelmUpgradeStrategy{
				Name: fleeetv1.RemediateOnFailure, RetryInterval: &metav1.Duration{Duration: time.Minute}}}
		}),
		want: []string{"spec.sync.package.helm.remediation.upgradeStrategy", "retryInterval needs name: RetryOnFailure"},
	}, {
		name: "helm retry interval under 10s",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync = helmSync()
			m.Spec.Sync.Package.Helm.Remediation = &fleeetv1.HelmRemediation{UpgradeStrategy: &fleeetv1.HelmUpgradeStrategy{
				Name: fleeetv1.RetryOnFailure, RetryInterval: &metav1.Duration{Duration: time.Second}}}
		}),
		want: []string{"spec.sync.package.helm.remediation.upgradeStrategy.retryInterval", "must be at least 10s"},
	}, {
		name: "upgrade remediation under RetryOnFailure",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync = helmSync()
			m.Spec.Sync.Package.Helm.Remediation = &fleeetv1.HelmRemediation{UpgradeRetries: ptr.To(int32(5)),
				UpgradeStrategy: &fleeetv1.HelmUpgradeStrategy{Name: fleeetv1.RetryOnFailure}}
		}),
		want: []string{"spec.sync.package.helm.remediation.upgradeStrategy", "which RetryOnFailure never does"},
	}, {
		name: "override path past its bound",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Overrides = []fleeetv1.Override{{Name: "eu", Kustomize: &fleeetv1.KustomizeOverride{Path: strings.Repeat("a", 1025)}}}
		}),
		want: []string{"spec.overrides[0].kustomize.path"},
	}, {
		name: "unknown helm drift detection mode",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync = helmSync()
			m.Spec.Sync.Package.Helm.DriftDetection = &fleeetv1.HelmDriftDetection{Mode: "enabled"}
		}),
		want: []string{"spec.sync.package.helm.driftDetection.mode", `Unsupported value: "enabled"`},
	}, {
		name: "drift ignore rule with a path that is no JSON pointer",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync = helmSync()
			m.Spec.Sync.Package.Helm.DriftDetection = &fleeetv1.HelmDriftDetection{
				Ignore: []fleeetv1.HelmDriftIgnoreRule{{Paths: []string{"spec.replicas"}}}}
		}),
		want: []string{"spec.sync.package.helm.driftDetection.ignore[0].paths[0]"},
	}, {
		name: "unknown helm CRD policy",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync = helmSync()
			m.Spec.Sync.Package.Helm.CRDs = "Replace"
		}),
		want: []string{"spec.sync.package.helm.crds", `Unsupported value: "Replace"`},
	}, {
		name: "empty post-renderer patch",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync = helmSync()
			m.Spec.Sync.Package.Helm.PostRenderers = []fleeetv1.KustomizePatch{{}}
		}),
		want: []string{"spec.sync.package.helm.postRenderers[0].patch"},
	}, {
		name: "health checks that wait would ignore",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Package.Kustomize.HealthChecks = []fleeetv1.HealthCheckReference{{Kind: "HelmRelease", Name: "db"}}
		}),
		want: []string{"spec.sync.package.kustomize.healthChecks", "healthChecks need wait: false"},
	}, {
		name: "decryption without a key Secret",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Package.Kustomize.Decryption = &fleeetv1.KustomizeDecryption{}
		}),
		want: []string{"spec.sync.package.kustomize.decryption.secretRef.name"},
	}, {
		name: "health check expression without current",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Package.Kustomize.HealthCheckExprs = []fleeetv1.HealthCheckExpr{{APIVersion: "example.com/v1", Kind: "Widget"}}
		}),
		want: []string{"spec.sync.package.kustomize.healthCheckExprs[0].current"},
	}, {
		name: "helm retries below -1",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync = helmSync()
			m.Spec.Sync.Package.Helm.Remediation = &fleeetv1.HelmRemediation{UpgradeRetries: ptr.To(int32(-2))}
		}),
		want: []string{"spec.sync.package.helm.remediation.upgradeRetries", "greater than or equal to -1"},
	}, {
		name: "helm timeout that is no duration",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Sync = helmSync() }),
		raw: func(o map[string]any) {
			helm := o["spec"].(map[string]any)["sync"].(map[string]any)["package"].(map[string]any)["helm"].(map[string]any)
			helm["timeout"] = "five minutes"
		},
		want: []string{"spec.sync.package.helm.timeout"},
	}, {
		name: "unknown rollout strategy",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Rollout.Strategy = "Canary" }),
		want: []string{"spec.rollout.strategy", `Unsupported value: "Canary"`},
	}, {
		name: "stages under AllAtOnce",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Rollout.Stages = []fleeetv1.RolloutStage{{Name: "canary"}}
		}),
		want: []string{"spec.rollout", "need strategy RollingUpdate"},
	}, {
		name: "a stage's maxUnavailable of 0",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
			m.Spec.Rollout.Stages = []fleeetv1.RolloutStage{{Name: "canary", MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
		}),
		want: []string{"spec.rollout.stages[0].maxUnavailable", "at least 1"},
	}, {
		name: "a stage's maxUnavailable as a fraction",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
			m.Spec.Rollout.Stages = []fleeetv1.RolloutStage{{Name: "canary", MaxUnavailable: ptr.To(intstr.FromString("0.5"))}}
		}),
		want: []string{"spec.rollout.stages[0].maxUnavailable"},
	}, {
		name: "a stage check whose timeout is shorter than its duration",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
			m.Spec.Rollout.Stages = []fleeetv1.RolloutStage{{Name: "canary", Check: &fleeetv1.StageCheck{Query: "up == 1",
				For: metav1.Duration{Duration: 10 * time.Minute}, Timeout: metav1.Duration{Duration: 5 * time.Minute}}}}
		}),
		want: []string{"spec.rollout.stages[0].check", "timeout must be 0 (wait for ever) or at least for"},
	}, {
		name: "a stage check without a query, for a negative while",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
			m.Spec.Rollout.Stages = []fleeetv1.RolloutStage{{Name: "canary", Check: &fleeetv1.StageCheck{
				For: metav1.Duration{Duration: -time.Minute}}}}
		}),
		want: []string{"spec.rollout.stages[0].check.query", "spec.rollout.stages[0].check.for", "must be from 0s to 24h"},
	}, {
		name: "two stages of one name",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
			m.Spec.Rollout.Stages = []fleeetv1.RolloutStage{{Name: "canary"}, {Name: "canary"}}
		}),
		want: []string{"spec.rollout.stages[1]", "Duplicate value"},
	}, {
		name: "an unknown failure policy",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
			m.Spec.Rollout.OnFailure = "Retry"
		}),
		want: []string{"spec.rollout.onFailure", `Unsupported value: "Retry"`},
	}, {
		name: "maxFailures over 100%",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
			m.Spec.Rollout.MaxFailures = ptr.To(intstr.FromString("101%"))
		}),
		want: []string{"spec.rollout.maxFailures", "percentage from 0% to 100%"},
	}, {
		name: "negative maxUnavailable",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Rollout.MaxUnavailable = ptr.To(intstr.FromInt32(-1)) }),
		want: []string{"spec.rollout.maxUnavailable", "at least 1"},
	}, {
		name: "maxUnavailable over 100%",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Rollout.MaxUnavailable = ptr.To(intstr.FromString("150%")) }),
		want: []string{"spec.rollout.maxUnavailable", "percentage from 1% to 100%"},
	}, {
		name: "negative minReadySeconds",
		obj:  module(func(m *fleeetv1.Module) { m.Spec.Rollout.MinReadySeconds = -5 }),
		want: []string{"spec.rollout.minReadySeconds"},
	}, {
		name: "control-plane binding to a Secret",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{{Name: "PASSWORD",
				ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "Secret", Name: "db", FieldPath: "/data/password"}}}
		}),
		want: []string{"spec.controlPlaneBindings[0].objectFieldRef.kind", "Secrets are never read"},
	}, {
		name: "binding with both a value and a field reference",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Bindings = []fleeetv1.Binding{{Name: "REGION", Value: ptr.To("eu"),
				ObjectFieldRef: &fleeetv1.ObjectFieldRef{APIVersion: "v1", Kind: "ConfigMap", Name: "c", FieldPath: "/data/r"}}}
		}),
		want: []string{"spec.sync.bindings[0]", "exactly one of value or objectFieldRef must be set"},
	}, {
		name: "binding field path that is not a JSON pointer",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Bindings = []fleeetv1.Binding{{Name: "REGION",
				ObjectFieldRef: &fleeetv1.ObjectFieldRef{APIVersion: "v1", Kind: "ConfigMap", Name: "c", FieldPath: "data.region"}}}
		}),
		want: []string{"spec.sync.bindings[0].objectFieldRef.fieldPath"},
	}, {
		name: "helm override on a kustomize sync",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Overrides = []fleeetv1.Override{{Name: "eu", Helm: &fleeetv1.HelmOverride{}}}
		}),
		want: []string{"spec.overrides", "helm overrides for a helm package"},
	}, {
		name: "override with both helm and kustomize",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Overrides = []fleeetv1.Override{{Name: "eu", Helm: &fleeetv1.HelmOverride{}, Kustomize: &fleeetv1.KustomizeOverride{}}}
		}),
		want: []string{"spec.overrides[0]", "exactly one of helm or kustomize must be set"},
	}, {
		name: "image that changes nothing",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Package.Kustomize.Images = []fleeetv1.KustomizeImage{{Name: "web"}}
		}),
		want: []string{"spec.sync.package.kustomize.images[0]", "at least one of newName, newTag or digest"},
	}, {
		name: "valuesFrom of another kind",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync = helmSync()
			m.Spec.Sync.Package.Helm.ValuesFrom = []fleeetv1.ValuesReference{{Kind: "Pod", Name: "x"}}
		}),
		want: []string{"spec.sync.package.helm.valuesFrom[0].kind", `Unsupported value: "Pod"`},
	}, {
		name: "dependency with both a name and a selector",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Name: "crds", Selector: &metav1.LabelSelector{}}}
		}),
		want: []string{"spec.sync.dependsOn[0]", "exactly one of name or selector must be set"},
	}, {
		name: "bootstrap module with downstream bindings",
		obj: &fleeetv1.BootstrapModule{ObjectMeta: metav1.ObjectMeta{Name: "bound", Namespace: ns},
			Spec: fleeetv1.BootstrapModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Sync: func() fleeetv1.SyncSpec {
				s := gitSync()
				s.Bindings = []fleeetv1.Binding{{Name: "REGION", Value: ptr.To("eu")}}
				return s
			}()}}},
		want: []string{"spec: Invalid value", "sync.bindings: a BootstrapModule is applied from the management cluster", "use controlPlaneBindings"},
	}, {
		name: "bootstrap module reading values from the management cluster",
		obj: &fleeetv1.BootstrapModule{ObjectMeta: metav1.ObjectMeta{Name: "values-from", Namespace: ns},
			Spec: fleeetv1.BootstrapModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Sync: func() fleeetv1.SyncSpec {
				s := helmSync()
				s.Package.Helm.ValuesFrom = []fleeetv1.ValuesReference{{Kind: "Secret", Name: "kubeconfig"}}
				return s
			}()}}},
		want: []string{"sync.package.helm.valuesFrom: a BootstrapModule is applied by Flux in the management cluster"},
	}, {
		name: "bootstrap module with dependencies",
		obj: &fleeetv1.BootstrapModule{ObjectMeta: metav1.ObjectMeta{Name: "waits", Namespace: ns},
			Spec: fleeetv1.BootstrapModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Sync: func() fleeetv1.SyncSpec {
				s := gitSync()
				s.DependsOn = []fleeetv1.Dependency{{Name: "crds"}}
				return s
			}()}}},
		want: []string{"sync.dependsOn: a BootstrapModule is applied by Flux from the management cluster without the agent"},
	}, {
		name: "bootstrap module delivering secrets",
		obj: &fleeetv1.BootstrapModule{ObjectMeta: metav1.ObjectMeta{Name: "delivers", Namespace: ns},
			Spec: fleeetv1.BootstrapModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Sync: func() fleeetv1.SyncSpec {
				s := gitSync()
				s.Secrets = []fleeetv1.SecretDelivery{{Name: "git-creds"}}
				return s
			}()}}},
		want: []string{"sync.secrets: a BootstrapModule is applied by Flux in the management cluster", "source.secretRef"},
	}, {
		name: "secret delivery naming a path",
		obj: module(func(m *fleeetv1.Module) {
			m.Spec.Sync.Secrets = []fleeetv1.SecretDelivery{{Name: "../team-b/db"}}
		}),
		want: []string{"spec.sync.secrets[0].name"},
	}, {
		name: "registration token allowing no registrations",
		obj: &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "none", Namespace: ns},
			Spec: fleeetv1.RegistrationTokenSpec{MaxRegistrations: -1}},
		want: []string{"spec.maxRegistrations"},
	}, {
		name: "upstream over plain http",
		obj: &fleeetv1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns},
			Spec: fleeetv1.UpstreamSpec{ClusterName: "edge-1",
				Management: fleeetv1.ManagementEndpoint{URL: "http://management:6443", Namespace: "team-a"}}},
		want: []string{"spec.management.url"},
	}, {
		name: "assemblage sync with an invalid name",
		obj: &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns},
			Spec: fleeetv1.AssemblageSpec{Syncs: []fleeetv1.NamedSync{{Name: "Not_A_Name", SyncSpec: gitSync()}}}},
		want: []string{"spec.syncs[0].name"},
	}, {
		name: "remote named as a further part of another's plan",
		obj:  &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Name: "edge.p3", Namespace: ns}},
		want: []string{"metadata.name", "not ending in .p1 to .p7"},
	}, {
		name: "upstream named as a further part of another's plan",
		obj: &fleeetv1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "mgmt.p1", Namespace: ns},
			Spec: fleeetv1.UpstreamSpec{ClusterName: "edge-1",
				Management: fleeetv1.ManagementEndpoint{URL: "https://management:6443", Namespace: "team-a"}}},
		want: []string{"metadata.name", "not ending in .p1 to .p7"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj := tc.obj
			if tc.raw != nil {
				raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
				g.Expect(err).NotTo(HaveOccurred())
				tc.raw(raw)
				u := &unstructured.Unstructured{Object: raw}
				u.SetGroupVersionKind(fleeetv1.GroupVersion.WithKind(kindOf(tc.obj)))
				obj = u
			}
			// Strict is what kubectl asks for by default: unknown fields are errors.
			err := cluster.Client.Create(t.Context(), obj, client.FieldValidation(metav1.FieldValidationStrict))
			g.Expect(err).To(HaveOccurred())
			for _, want := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(want))
			}
		})
	}
}

func TestCRDsAreCompleteForKubectl(t *testing.T) {
	for _, plural := range []string{"modules", "bootstrapmodules", "remotes", "proxyassemblages",
		"registrationtokens", "upstreams", "assemblages"} {
		t.Run(plural, func(t *testing.T) {
			g := NewWithT(t)
			var crd apiextensionsv1.CustomResourceDefinition
			g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Name: plural + ".fleeet.dev"}, &crd)).To(Succeed())

			g.Expect(crd.Spec.Scope).To(Equal(apiextensionsv1.NamespaceScoped))
			g.Expect(crd.Spec.Names.ShortNames).NotTo(BeEmpty())
			g.Expect(crd.Spec.Names.Categories).To(ContainElement("fleeet"))
			g.Expect(crd.Spec.Versions).To(HaveLen(1))
			v := crd.Spec.Versions[0]
			g.Expect(v.Subresources).NotTo(BeNil())
			g.Expect(v.Subresources.Status).NotTo(BeNil(), "status subresource")
			columns := []string{}
			for _, c := range v.AdditionalPrinterColumns {
				columns = append(columns, c.Name)
			}
			g.Expect(columns).To(ContainElement("Age"))
			g.Expect(slices.ContainsFunc(columns, func(c string) bool { return c == "Ready" || c == "Status" })).
				To(BeTrue(), "a READY or STATUS column: %v", columns)

			// kubectl explain shows a description for every field.
			undocumented := undocumentedFields(v.Schema.OpenAPIV3Schema, "")
			g.Expect(undocumented).To(BeEmpty())
		})
	}
}

// The compiler bounds a plan by MaxSyncs so that every plan it writes can
// be mirrored into a cluster's Assemblage: the constant and the CRD must
// agree.
func TestAssemblageHoldsMaxSyncs(t *testing.T) {
	g := NewWithT(t)
	var crd apiextensionsv1.CustomResourceDefinition
	g.Expect(cluster.Client.Get(t.Context(), client.ObjectKey{Name: "assemblages.fleeet.dev"}, &crd)).To(Succeed())
	syncs := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["syncs"]
	g.Expect(syncs.MaxItems).To(HaveValue(BeEquivalentTo(fleeetv1.MaxSyncs)))
}

// undocumentedFields lists the paths of schema properties without a description.
func undocumentedFields(s *apiextensionsv1.JSONSchemaProps, path string) []string {
	var missing []string
	for name, prop := range s.Properties {
		p := path + "." + name
		if p == ".metadata" {
			continue // ObjectMeta is documented by Kubernetes itself.
		}
		if strings.TrimSpace(prop.Description) == "" {
			missing = append(missing, p)
		}
		missing = append(missing, undocumentedFields(&prop, p)...)
	}
	if s.Items != nil && s.Items.Schema != nil {
		missing = append(missing, undocumentedFields(s.Items.Schema, path+"[]")...)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		missing = append(missing, undocumentedFields(s.AdditionalProperties.Schema, path+"{}")...)
	}
	return missing
}

func kindOf(obj client.Object) string {
	gvks, _, err := testenv.Scheme.ObjectKinds(obj)
	if err != nil {
		panic(err)
	}
	return gvks[0].Kind
}

// What a cluster reports of its workloads is bounded by the schema: a
// message past 512 characters, a reason that is not one word of letters
// and digits, or negative counts are refused on the ProxyAssemblage
// upstream, whatever the agent (or an attacker holding its identity) sends.
func TestWorkloadHealthAClusterReportsIsBounded(t *testing.T) {
	g := NewWithT(t)
	reportSync := syncReporter(t, "health")
	report := func(h fleeetv1.WorkloadHealth) error {
		return reportSync(fleeetv1.SyncStatus{Name: "app", State: fleeetv1.SyncReady, Health: &h})
	}
	g.Expect(report(fleeetv1.WorkloadHealth{Workloads: 1, ReadyPods: 0, DesiredPods: 2, Reason: "CrashLoopBackOff",
		Message: "Deployment web: pod web-1: container app"})).To(Succeed())
	for _, tc := range []struct {
		health fleeetv1.WorkloadHealth
		want   string
	}{
		{fleeetv1.WorkloadHealth{Message: strings.Repeat("x", 513)}, "status.syncs[0].health.message: Too long"},
		{fleeetv1.WorkloadHealth{Reason: "CrashLoop; token=abc"}, "status.syncs[0].health.reason"},
		{fleeetv1.WorkloadHealth{Reason: strings.Repeat("R", 65)}, "status.syncs[0].health.reason: Too long"},
		{fleeetv1.WorkloadHealth{ReadyPods: -1}, "status.syncs[0].health.readyPods"},
	} {
		g.Expect(report(tc.health)).To(MatchError(ContainSubstring(tc.want)), "%+v", tc.health)
	}
}

// Each source a sync may name is accepted with the packages it pairs with.
func TestEverySourceKindIsAcceptedWithItsPackages(t *testing.T) {
	ns := cluster.Namespace(t, "sources", nil)
	const digest = "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	secret := &fleeetv1.LocalObjectReference{Name: "credentials"}
	ignore := "*.md\n"
	kustomize := fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{}}
	helm := fleeetv1.Package{Helm: &fleeetv1.HelmPackage{}}
	cases := map[string]fleeetv1.SyncSpec{
		"ssh-git": {Source: fleeetv1.Source{
			Git:       &fleeetv1.GitSource{URL: "ssh://git@git.example.com/platform.git", Tag: "v1.0.0", Ignore: &ignore},
			SecretRef: secret,
		}, Package: kustomize, Interval: &metav1.Duration{Duration: time.Hour}, RetryInterval: &metav1.Duration{Duration: 10 * time.Second}},
		"git-chart": {Source: gitSync().Source, Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{Chart: "charts/app"}}},
		"oci-kustomize": {Source: func() fleeetv1.Source {
			s := ociSource("", digest)
			s.OCI.Verify = &fleeetv1.OCIVerification{SecretRef: fleeetv1.LocalObjectReference{Name: "cosign"}}
			s.SecretRef, s.CertSecretRef = secret, &fleeetv1.LocalObjectReference{Name: "ca"}
			return s
		}(), Package: kustomize},
		"oci-chart": {Source: ociSource("1.2.3", ""), Package: helm},
	}
	for name, spec := range cases {
		t.Run(name, func(t *testing.T) {
			m := minimalModule(ns)
			m.Name, m.Spec.Sync = name, spec
			NewWithT(t).Expect(cluster.Client.Create(t.Context(), m, client.FieldValidation(metav1.FieldValidationStrict))).To(Succeed())
		})
	}
}

// What a cluster reports of drift is counts and object names only: nothing
// else fits, so a hostile cluster cannot smuggle text into fleetctl's
// terminal or the dashboard through it.
func TestDriftAClusterReportsIsBounded(t *testing.T) {
	g := NewWithT(t)
	reportSync := syncReporter(t, "drift")
	report := func(d fleeetv1.SyncDrift) error {
		return reportSync(fleeetv1.SyncStatus{Name: "app", State: fleeetv1.SyncReady, Drift: &d})
	}
	g.Expect(report(fleeetv1.SyncDrift{Detected: 2, Corrected: 2,
		Objects: []string{"Deployment/team-a/web", "ClusterRole/web-reader"}})).To(Succeed())
	for _, tc := range []struct {
		drift fleeetv1.SyncDrift
		want  string
	}{
		{fleeetv1.SyncDrift{Objects: []string{"Deployment/team-a/web \x1b[2J"}}, "status.syncs[0].drift.objects[0]"},
		{fleeetv1.SyncDrift{Objects: make([]string, 17)}, "status.syncs[0].drift.objects: Too many"},
		{fleeetv1.SyncDrift{Detected: -1}, "status.syncs[0].drift.detected"},
	} {
		g.Expect(report(tc.drift)).To(MatchError(ContainSubstring(tc.want)), "%+v", tc.drift)
	}
}

// syncReporter creates a ProxyAssemblage in a new namespace and returns a
// function that reports one sync's status on it, as a cluster's agent does.
func syncReporter(t *testing.T, namespace string) func(fleeetv1.SyncStatus) error {
	ns := cluster.Namespace(t, namespace, nil)
	pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Namespace: ns}}
	NewWithT(t).Expect(cluster.Client.Create(t.Context(), pa)).To(Succeed())
	return func(st fleeetv1.SyncStatus) error {
		pa.Status.Syncs = []fleeetv1.SyncStatus{st}
		return cluster.Client.Status().Update(t.Context(), pa)
	}
}
