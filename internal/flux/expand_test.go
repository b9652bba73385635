package flux

import (
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestObjectNamesAreStableShortAndCollisionFree(t *testing.T) {
	g := NewWithT(t)
	g.Expect(ObjectName("a-b", "c")).NotTo(Equal(ObjectName("a", "b-c")))
	g.Expect(ObjectName("plan", "app")).To(Equal(ObjectName("plan", "app")))
	long := ObjectName("plan", "a-very-long-sync-name-that-goes-on-and-on-beyond-sixty-three-chars")
	g.Expect(len(long)).To(BeNumerically("<=", 63))
	g.Expect(long).To(MatchRegexp(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`))
}

func TestRevisionMatchesWhatFluxReports(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef01234567"
	const digest = "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	const other = "sha256:ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
	cases := []struct {
		want             Revision
		applied, fetched string
		match            bool
	}{
		{Revision{GitTag: "v1.0.0"}, "v1.0.0@sha1:" + sha, "", true},
		{Revision{GitTag: "v1.0.0"}, "v1.0.01@sha1:" + sha, "", false},
		{Revision{GitTag: "v1.0.0"}, "", "", false},
		{Revision{GitCommit: sha}, "sha1:" + sha, "", true},
		{Revision{GitCommit: sha}, "main@sha1:" + sha, "", true},
		{Revision{GitCommit: sha}, "sha1:ffff", "", false},
		{Revision{ChartVersion: "1.2.3"}, "1.2.3", "", true},
		{Revision{ChartVersion: "v1.2.3"}, "1.2.3", "", true},
		{Revision{ChartVersion: "1.2.3"}, "1.2.4", "", false},
		// A Kustomization of an OCIRepository applies its artifact revision.
		{Revision{OCITag: "1.0.0"}, "1.0.0@" + digest, "", true},
		{Revision{OCITag: "1.0.0"}, "1.0.01@" + digest, "", false},
		{Revision{OCIDigest: digest}, digest, "", true},
		{Revision{OCIDigest: digest}, other, "", false},
		// A chart from git is versioned after the commit the source fetched.
		{Revision{GitTag: "v1.0.0", Chart: true}, "0.1.0+" + sha[:12], "v1.0.0@sha1:" + sha, true},
		{Revision{GitTag: "v1.0.0", Chart: true}, "0.1.0+ffffffffffff", "v1.0.0@sha1:" + sha, false},
		{Revision{GitTag: "v1.0.0", Chart: true}, "0.1.0+" + sha[:12], "v2.0.0@sha1:" + sha, false},
		{Revision{GitTag: "v1.0.0", Chart: true}, "0.1.0+" + sha[:12], "", false},
		{Revision{GitCommit: sha, Chart: true}, "0.1.0+" + sha[:12], "sha1:" + sha, true},
		// A chart from an OCI artifact records the digest it came from.
		{Revision{OCITag: "0.1.0", Chart: true}, "0.1.0+001122334455@" + digest, "0.1.0@" + digest, true},
		{Revision{OCITag: "0.1.0", Chart: true}, "0.1.0+ffeeddccbbaa@" + other, "0.1.0@" + digest, false},
		{Revision{OCIDigest: digest, Chart: true}, "0.1.0+001122334455@" + digest, digest, true},
		{Revision{OCIDigest: digest, Chart: true}, "0.1.0+001122334455@" + digest, "", false},
	}
	for _, tc := range cases {
		NewWithT(t).Expect(tc.want.Matches(tc.applied, tc.fetched)).To(Equal(tc.match), "%+v vs %q, %q", tc.want, tc.applied, tc.fetched)
	}
}

// A retry request is a token: each new one re-applies the sync's objects
// asking Flux to reconcile them and, for a HelmRelease, to reset its failure
// counts; none leaves the objects as they always were.
func TestARetryRequestReachesFluxOnce(t *testing.T) {
	g := NewWithT(t)
	sync := &fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "app", Version: "1.0.0"}},
		Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{}},
	}}
	expand := func(retry string) *Expansion {
		x, err := Expand(Target{Owner: "plan", Namespace: "team-a", Retry: retry}, sync, nil, nil)
		g.Expect(err).NotTo(HaveOccurred())
		return x
	}
	plain, first, again, second := expand(""), expand("t1"), expand("t1"), expand("t2")

	g.Expect(plain.Applier.GetAnnotations()).To(HaveLen(1), "only the spec hash without a retry request")
	g.Expect(first.Applier.GetAnnotations()).To(HaveKeyWithValue(meta.ReconcileRequestAnnotation, "t1"))
	g.Expect(first.Applier.GetAnnotations()).To(HaveKeyWithValue(helmv2.ResetRequestAnnotation, "t1"))
	g.Expect(first.Source.GetAnnotations()).To(HaveKeyWithValue(meta.ReconcileRequestAnnotation, "t1"))
	g.Expect(first.Source.GetAnnotations()).NotTo(HaveKey(helmv2.ResetRequestAnnotation), "only HelmReleases have failure counts")

	hash := func(x *Expansion) string { return x.Applier.GetAnnotations()[fleeetv1.SpecHashAnnotation] }
	g.Expect(hash(first)).NotTo(Equal(hash(plain)), "a retry request re-applies")
	g.Expect(hash(again)).To(Equal(hash(first)), "the same request is applied once")
	g.Expect(hash(second)).NotTo(Equal(hash(first)), "a new request re-applies")
}

// A kustomize sync waits for what it applied to be ready, within five
// minutes, unless it opts out or sets its own timeout.
func TestKustomizationsWaitForTheirObjectsByDefault(t *testing.T) {
	minute := &metav1.Duration{Duration: time.Minute}
	cases := []struct {
		name    string
		pkg     fleeetv1.KustomizePackage
		wait    bool
		timeout time.Duration
	}{
		{"defaults", fleeetv1.KustomizePackage{}, true, 5 * time.Minute},
		{"wait set", fleeetv1.KustomizePackage{Wait: ptr.To(true)}, true, 5 * time.Minute},
		{"opted out", fleeetv1.KustomizePackage{Wait: ptr.To(false)}, false, 5 * time.Minute},
		{"own timeout", fleeetv1.KustomizePackage{Timeout: minute}, true, time.Minute},
	}
	for _, tc := range cases {
		g := NewWithT(t)
		ks := kustomization(g, &tc.pkg)
		g.Expect(ks.Spec.Wait).To(Equal(tc.wait), tc.name)
		g.Expect(ks.Spec.Timeout).To(Equal(&metav1.Duration{Duration: tc.timeout}), tc.name)
		g.Expect(ks.Spec.HealthChecks).To(BeEmpty(), "wait checks every applied object")
	}
}

// A HelmRelease retries failed installs and upgrades three times and rolls
// a failed upgrade back, the last one too, within five minutes per action,
// whatever Flux's own defaults; each of these is the sync's to change.
func TestHelmReleasesRemediateByDefault(t *testing.T) {
	rollback, uninstall := helmv2.RollbackRemediationStrategy, helmv2.UninstallRemediationStrategy
	remediate := string(helmv2.ActionStrategyRemediateOnFailure)
	cases := []struct {
		name    string
		pkg     fleeetv1.HelmPackage
		timeout time.Duration
		install helmv2.InstallRemediation
		upgrade helmv2.UpgradeRemediation
	}{
		{"defaults", fleeetv1.HelmPackage{}, 5 * time.Minute,
			helmv2.InstallRemediation{Retries: 3},
			helmv2.UpgradeRemediation{Retries: 3, RemediateLastFailure: ptr.To(true), Strategy: &rollback}},
		{"empty remediation", fleeetv1.HelmPackage{Remediation: &fleeetv1.HelmRemediation{}}, 5 * time.Minute,
			helmv2.InstallRemediation{Retries: 3},
			helmv2.UpgradeRemediation{Retries: 3, RemediateLastFailure: ptr.To(true), Strategy: &rollback}},
		{"every field overridden", fleeetv1.HelmPackage{
			Timeout: &metav1.Duration{Duration: 90 * time.Second},
			Remediation: &fleeetv1.HelmRemediation{
				InstallRetries: ptr.To(int32(0)), UpgradeRetries: ptr.To(int32(-1)),
				Strategy: fleeetv1.UninstallRemediation, RemediateLastFailure: ptr.To(false),
			}}, 90 * time.Second,
			helmv2.InstallRemediation{Retries: 0},
			helmv2.UpgradeRemediation{Retries: -1, RemediateLastFailure: ptr.To(false), Strategy: &uninstall}},
		{"explicit rollback", fleeetv1.HelmPackage{Remediation: &fleeetv1.HelmRemediation{
			UpgradeRetries: ptr.To(int32(1)), Strategy: fleeetv1.RollbackRemediation}}, 5 * time.Minute,
			helmv2.InstallRemediation{Retries: 3},
			helmv2.UpgradeRemediation{Retries: 1, RemediateLastFailure: ptr.To(true), Strategy: &rollback}},
		{"explicit RemediateOnFailure", fleeetv1.HelmPackage{Remediation: &fleeetv1.HelmRemediation{
			UpgradeStrategy: &fleeetv1.HelmUpgradeStrategy{Name: fleeetv1.RemediateOnFailure}}}, 5 * time.Minute,
			helmv2.InstallRemediation{Retries: 3},
			helmv2.UpgradeRemediation{Retries: 3, RemediateLastFailure: ptr.To(true), Strategy: &rollback}},
	}
	for _, tc := range cases {
		g := NewWithT(t)
		hr := helmRelease(g, &tc.pkg)
		g.Expect(hr.Spec.Timeout).To(Equal(&metav1.Duration{Duration: tc.timeout}), tc.name)
		g.Expect(hr.Spec.Install.Strategy.Name).To(Equal(remediate), "%s: remediation applies even under DefaultToRetryOnFailure", tc.name)
		g.Expect(hr.Spec.Upgrade.Strategy.Name).To(Equal(remediate), tc.name)
		g.Expect(*hr.Spec.Install.Remediation).To(Equal(tc.install), tc.name)
		g.Expect(*hr.Spec.Upgrade.Remediation).To(Equal(tc.upgrade), tc.name)
		g.Expect(hr.Spec.Install.Remediation.MustRemediateLastFailure()).To(BeFalse(), "%s: a failed install stays to be looked at", tc.name)
	}
}

// RetryOnFailure reaches the HelmRelease's upgrade strategy with its
// interval (Flux's 5m when unset) and no upgrade remediation, which Flux
// would ignore; installs keep remediating, and the CRDs policy still
// reaches the upgrade.
func TestHelmRetryOnFailureReachesTheUpgradeStrategy(t *testing.T) {
	retry := string(helmv2.ActionStrategyRetryOnFailure)
	for _, interval := range []*metav1.Duration{nil, {Duration: 2 * time.Minute}} {
		g := NewWithT(t)
		hr := helmRelease(g, &fleeetv1.HelmPackage{CRDs: fleeetv1.CRDsCreateReplace, Remediation: &fleeetv1.HelmRemediation{
			InstallRetries:  ptr.To(int32(2)),
			UpgradeStrategy: &fleeetv1.HelmUpgradeStrategy{Name: fleeetv1.RetryOnFailure, RetryInterval: interval},
		}})
		g.Expect(hr.Spec.Upgrade.Strategy).To(Equal(&helmv2.UpgradeStrategy{Name: retry, RetryInterval: interval}))
		g.Expect(hr.Spec.Upgrade.Remediation).To(BeNil())
		g.Expect(hr.Spec.Upgrade.GetRetry(false)).NotTo(BeNil(), "helm-controller retries")
		want := 5 * time.Minute
		if interval != nil {
			want = interval.Duration
		}
		g.Expect(hr.Spec.Upgrade.GetRetry(false).GetRetryInterval()).To(Equal(want))
		g.Expect(hr.Spec.Upgrade.CRDs).To(Equal(helmv2.CreateReplace))
		g.Expect(hr.Spec.Install.Strategy.Name).To(Equal(string(helmv2.ActionStrategyRemediateOnFailure)))
		g.Expect(*hr.Spec.Install.Remediation).To(Equal(helmv2.InstallRemediation{Retries: 2}))
	}
}

// expand expands one sync for tenant team-a, failing the test on an error.
func expand(g Gomega, spec fleeetv1.SyncSpec) *Expansion {
	x, err := Expand(Target{Owner: "plan", Namespace: "team-a", ServiceAccountName: "tenant"},
		&fleeetv1.NamedSync{Name: "app", SyncSpec: spec}, nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	return x
}

// A private git source passes its credentials Secret and ignore rules to
// the GitRepository, which the Kustomization reads.
func TestAPrivateGitSourceNamesItsSecretAndIgnores(t *testing.T) {
	g := NewWithT(t)
	ignore := "/*\n!/deploy\n"
	x := expand(g, fleeetv1.SyncSpec{
		Source: fleeetv1.Source{
			Git:       &fleeetv1.GitSource{URL: "ssh://git@git.example.com/app.git", Tag: "v1.0.0", Ignore: &ignore},
			SecretRef: &fleeetv1.LocalObjectReference{Name: "git-ssh"},
		},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "deploy"}},
	})
	repo := x.Source.(*sourcev1.GitRepository)
	g.Expect(repo.Spec.URL).To(Equal("ssh://git@git.example.com/app.git"))
	g.Expect(repo.Spec.SecretRef).To(Equal(&meta.LocalObjectReference{Name: "git-ssh"}))
	g.Expect(repo.Spec.Ignore).To(Equal(&ignore))
	g.Expect(x.Applier.(*kustomizev1.Kustomization).Spec.SourceRef).To(Equal(
		kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: repo.Name}))
	g.Expect(x.Want).To(Equal(Revision{GitTag: "v1.0.0"}))
}

// An OCI source becomes an OCIRepository pinned to its tag or digest, with
// its credentials, CA and cosign keys; a Kustomization applies it.
func TestAnOCISourceBecomesAPinnedOCIRepository(t *testing.T) {
	g := NewWithT(t)
	const digest = "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	x := expand(g, fleeetv1.SyncSpec{
		Source: fleeetv1.Source{
			OCI: &fleeetv1.OCISource{URL: "oci://registry.example.com/app", Digest: digest,
				Verify: &fleeetv1.OCIVerification{SecretRef: fleeetv1.LocalObjectReference{Name: "cosign-keys"}}},
			SecretRef:     &fleeetv1.LocalObjectReference{Name: "pull"},
			CertSecretRef: &fleeetv1.LocalObjectReference{Name: "ca"},
		},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./"}},
	})
	repo := x.Source.(*sourcev1.OCIRepository)
	g.Expect(repo.Spec.URL).To(Equal("oci://registry.example.com/app"))
	g.Expect(repo.Spec.Reference).To(Equal(&sourcev1.OCIRepositoryRef{Digest: digest}))
	g.Expect(repo.Spec.SecretRef).To(Equal(&meta.LocalObjectReference{Name: "pull"}))
	g.Expect(repo.Spec.CertSecretRef).To(Equal(&meta.LocalObjectReference{Name: "ca"}))
	g.Expect(repo.Spec.Verify).To(Equal(&sourcev1.OCIRepositoryVerification{
		Provider: "cosign", SecretRef: &meta.LocalObjectReference{Name: "cosign-keys"}}))
	g.Expect(repo.Spec.LayerSelector).To(BeNil(), "Flux's kustomize artifact has one layer")
	g.Expect(repo.Spec.Insecure).To(BeFalse())
	g.Expect(x.Applier.(*kustomizev1.Kustomization).Spec.SourceRef.Kind).To(Equal(sourcev1.OCIRepositoryKind))
	g.Expect(x.Want).To(Equal(Revision{OCIDigest: digest}))
}

// A helm package of an OCI source installs the chart layer of the artifact
// through chartRef, Flux's way for OCI charts.
func TestAnOCIChartIsReleasedThroughChartRef(t *testing.T) {
	g := NewWithT(t)
	x := expand(g, fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: "oci://registry.example.com/charts/app", Tag: "1.2.3", Insecure: true}},
		Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{}},
	})
	repo := x.Source.(*sourcev1.OCIRepository)
	g.Expect(repo.Spec.Reference).To(Equal(&sourcev1.OCIRepositoryRef{Tag: "1.2.3"}))
	g.Expect(repo.Spec.Insecure).To(BeTrue(), "a plain-HTTP registry, as the sync says")
	g.Expect(repo.Spec.LayerSelector).To(Equal(&sourcev1.OCILayerSelector{
		MediaType: "application/vnd.cncf.helm.chart.content.v1.tar+gzip", Operation: sourcev1.OCILayerCopy}))
	hr := x.Applier.(*helmv2.HelmRelease)
	g.Expect(hr.Spec.Chart).To(BeNil())
	g.Expect(hr.Spec.ChartRef).To(Equal(&helmv2.CrossNamespaceSourceReference{Kind: sourcev1.OCIRepositoryKind, Name: repo.Name}))
	g.Expect(x.Want).To(Equal(Revision{OCITag: "1.2.3", Chart: true}))
}

// A helm package of a git source builds the chart at package.helm.chart,
// anew for every commit, so the release names the commit.
func TestAChartFromAGitPathIsRebuiltForEveryCommit(t *testing.T) {
	g := NewWithT(t)
	x := expand(g, fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}},
		Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{Chart: "charts/app"}},
	})
	hr := x.Applier.(*helmv2.HelmRelease)
	g.Expect(hr.Spec.Chart.Spec).To(Equal(helmv2.HelmChartTemplateSpec{
		Chart: "charts/app", ReconcileStrategy: sourcev1.ReconcileStrategyRevision,
		SourceRef: helmv2.CrossNamespaceObjectReference{Kind: sourcev1.GitRepositoryKind, Name: x.Source.GetName()},
	}))
	g.Expect(x.Want).To(Equal(Revision{GitTag: "v1.0.0", Chart: true}))
}

// An oci:// Helm repository is typed oci and checked against its CA.
func TestAnOCIHelmRepositoryIsTypedOCI(t *testing.T) {
	g := NewWithT(t)
	x := expand(g, fleeetv1.SyncSpec{
		Source: fleeetv1.Source{
			Helm:          &fleeetv1.HelmSource{URL: "oci://registry.example.com/charts", Chart: "app", Version: "1.2.3"},
			SecretRef:     &fleeetv1.LocalObjectReference{Name: "pull"},
			CertSecretRef: &fleeetv1.LocalObjectReference{Name: "ca"},
		},
		Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{}},
	})
	repo := x.Source.(*sourcev1.HelmRepository)
	g.Expect(repo.Spec.Type).To(Equal(sourcev1.HelmRepositoryTypeOCI))
	g.Expect(repo.Spec.SecretRef).To(Equal(&meta.LocalObjectReference{Name: "pull"}))
	g.Expect(repo.Spec.CertSecretRef).To(Equal(&meta.LocalObjectReference{Name: "ca"}))
	g.Expect(x.Applier.(*helmv2.HelmRelease).Spec.Chart.Spec.Version).To(Equal("1.2.3"))
	g.Expect(x.Want).To(Equal(Revision{ChartVersion: "1.2.3"}))
}

// Every Flux object of a sync runs at the sync's interval; its
// Kustomization retries at its retryInterval. Unset, 10m and 1m.
func TestIntervalsReachEveryFluxObject(t *testing.T) {
	git := fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}}
	helm := fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "app", Version: "1.0.0"}}
	kustomize := fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{}}
	helmPkg := fleeetv1.Package{Helm: &fleeetv1.HelmPackage{}}
	cases := []struct {
		name            string
		spec            fleeetv1.SyncSpec
		interval, retry time.Duration
	}{
		{"kustomize defaults", fleeetv1.SyncSpec{Source: git, Package: kustomize}, 10 * time.Minute, time.Minute},
		{"kustomize set", fleeetv1.SyncSpec{Source: git, Package: kustomize,
			Interval: &metav1.Duration{Duration: time.Hour}, RetryInterval: &metav1.Duration{Duration: 30 * time.Second}},
			time.Hour, 30 * time.Second},
		{"helm defaults", fleeetv1.SyncSpec{Source: helm, Package: helmPkg}, 10 * time.Minute, 0},
		{"helm set", fleeetv1.SyncSpec{Source: helm, Package: helmPkg, Interval: &metav1.Duration{Duration: 2 * time.Minute}},
			2 * time.Minute, 0},
	}
	for _, tc := range cases {
		g := NewWithT(t)
		x := expand(g, tc.spec)
		switch src := x.Source.(type) {
		case *sourcev1.GitRepository:
			g.Expect(src.Spec.Interval.Duration).To(Equal(tc.interval), tc.name)
		case *sourcev1.HelmRepository:
			g.Expect(src.Spec.Interval.Duration).To(Equal(tc.interval), tc.name)
		}
		switch a := x.Applier.(type) {
		case *kustomizev1.Kustomization:
			g.Expect(a.Spec.Interval.Duration).To(Equal(tc.interval), tc.name)
			g.Expect(a.Spec.RetryInterval.Duration).To(Equal(tc.retry), tc.name)
		case *helmv2.HelmRelease:
			g.Expect(a.Spec.Interval.Duration).To(Equal(tc.interval), tc.name)
		}
	}
}

// A sync the schema would refuse is an error naming the field, not Flux
// objects that cannot work.
func TestImpossiblePairingsAreErrors(t *testing.T) {
	git := fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}}
	helm := fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "app", Version: "1.0.0"}}
	for spec, want := range map[*fleeetv1.SyncSpec]string{
		{Source: git, Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{}}}:               "package.helm.chart: must name",
		{Source: helm, Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{}}}:    "package: set kustomize or helm",
		{Source: fleeetv1.Source{}, Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{}}}: "source: exactly one of",
	} {
		_, err := Expand(Target{Owner: "plan", Namespace: "team-a"}, &fleeetv1.NamedSync{Name: "app", SyncSpec: *spec}, nil, nil)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring(want)))
	}
}

// Patches, images, components and substituteFrom reach the Kustomization as
// written; bindings expand in substitute values only, never in a patch,
// where $(NAME) is Kubernetes' own syntax.
func TestKustomizePackageOptionsReachTheKustomization(t *testing.T) {
	g := NewWithT(t)
	sync := &fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
		Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1"}},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{
			Substitute: map[string]string{"REGION": "$(REGION)"},
			Patches: []fleeetv1.KustomizePatch{{
				Patch:  "- op: add\n  path: /spec/template/spec/containers/0/args/-\n  value: --name=$(POD_NAME)",
				Target: &fleeetv1.PatchTarget{Group: "apps", Version: "v1", Kind: "Deployment", Name: "web", LabelSelector: "tier=front"},
			}},
			Images:         []fleeetv1.KustomizeImage{{Name: "nginx", NewName: "mirror.example.com/nginx", NewTag: "1.27"}},
			Components:     []string{"../components/ha"},
			SubstituteFrom: []fleeetv1.SubstituteReference{{Kind: "Secret", Name: "db", Optional: true}},
		}},
	}}
	x, err := Expand(Target{Owner: "plan", Namespace: "team-a"}, sync, map[string]string{"REGION": "eu", "POD_NAME": "x"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	ks := x.Applier.(*kustomizev1.Kustomization)
	g.Expect(ks.Spec.PostBuild.Substitute).To(Equal(map[string]string{"REGION": "eu"}))
	g.Expect(ks.Spec.PostBuild.SubstituteFrom).To(Equal([]kustomizev1.SubstituteReference{{Kind: "Secret", Name: "db", Optional: true}}))
	g.Expect(ks.Spec.Patches).To(HaveLen(1))
	g.Expect(ks.Spec.Patches[0].Patch).To(ContainSubstring("--name=$(POD_NAME)"), "a patch is not expanded")
	g.Expect(*ks.Spec.Patches[0].Target).To(Equal(kustomize.Selector{Group: "apps", Version: "v1", Kind: "Deployment", Name: "web", LabelSelector: "tier=front"}))
	g.Expect(ks.Spec.Images).To(Equal([]kustomize.Image{{Name: "nginx", NewName: "mirror.example.com/nginx", NewTag: "1.27"}}))
	g.Expect(ks.Spec.Components).To(Equal([]string{"../components/ha"}))
}

// valuesFrom reaches the HelmRelease in order, beside the expanded values.
func TestHelmValuesFromReachTheHelmRelease(t *testing.T) {
	g := NewWithT(t)
	sync := &fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
		Source: fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "app", Version: "1.0.0"}},
		Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{ValuesFrom: []fleeetv1.ValuesReference{
			{Kind: "ConfigMap", Name: "defaults"},
			{Kind: "Secret", Name: "db", ValuesKey: "password", TargetPath: "db.password", Optional: true},
		}}},
	}}
	x, err := Expand(Target{Owner: "plan", Namespace: "team-a"}, sync, nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(x.Applier.(*helmv2.HelmRelease).Spec.ValuesFrom).To(Equal([]helmv2.ValuesReference{
		{Kind: "ConfigMap", Name: "defaults"},
		{Kind: "Secret", Name: "db", ValuesKey: "password", TargetPath: "db.password", Optional: true},
	}))
}

// The Flux options a platform engineer sets on a kustomize sync reach its
// Kustomization unchanged: SOPS decryption with the named key Secret, force
// for immutable fields, health checks and their CEL expressions.
func TestKustomizeOptionsReachTheKustomization(t *testing.T) {
	g := NewWithT(t)
	pkg := fleeetv1.KustomizePackage{
		Wait:       ptr.To(false),
		Decryption: &fleeetv1.KustomizeDecryption{SecretRef: fleeetv1.LocalObjectReference{Name: "sops-age"}},
		Force:      ptr.To(true),
		HealthChecks: []fleeetv1.HealthCheckReference{
			{APIVersion: "helm.toolkit.fluxcd.io/v2", Kind: "HelmRelease", Name: "db", Namespace: "data"}},
		HealthCheckExprs: []fleeetv1.HealthCheckExpr{{APIVersion: "example.com/v1", Kind: "Widget",
			Current: "status.phase == 'Ready'", Failed: "status.phase == 'Failed'"}},
	}
	ks := kustomization(g, &pkg).Spec
	g.Expect(ks.Decryption).To(Equal(&kustomizev1.Decryption{Provider: "sops", SecretRef: &meta.LocalObjectReference{Name: "sops-age"}}))
	g.Expect(ks.Force).To(BeTrue())
	g.Expect(ks.HealthChecks).To(Equal([]meta.NamespacedObjectKindReference{
		{APIVersion: "helm.toolkit.fluxcd.io/v2", Kind: "HelmRelease", Name: "db", Namespace: "data"}}))
	g.Expect(ks.HealthCheckExprs).To(Equal([]kustomize.CustomHealthCheck{{APIVersion: "example.com/v1", Kind: "Widget",
		HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: "status.phase == 'Ready'", Failed: "status.phase == 'Failed'"}}}))

	defaulted := kustomization(g, &fleeetv1.KustomizePackage{TargetNamespace: "apps", HealthChecks: []fleeetv1.HealthCheckReference{{Kind: "ConfigMap", Name: "flag"}}}).Spec
	g.Expect(defaulted.HealthChecks[0].Namespace).To(Equal("apps"), "the sync's targetNamespace")
	defaulted = kustomization(g, &fleeetv1.KustomizePackage{HealthChecks: []fleeetv1.HealthCheckReference{{Kind: "ConfigMap", Name: "flag"}}}).Spec
	g.Expect(defaulted.HealthChecks[0].Namespace).To(Equal("team-a"), "the namespace of the sync's Flux objects")

	pks := kustomization(g, &fleeetv1.KustomizePackage{}).Spec
	g.Expect(pks.Decryption).To(BeNil(), "nothing is decrypted unless asked")
	g.Expect(pks.Force).To(BeFalse(), "nothing is recreated unless asked")
}

// A HelmRelease detects and corrects drift unless its sync says otherwise,
// and carries the sync's CRD policy, namespace creation and post-renderer
// patches.
func TestHelmOptionsReachTheHelmRelease(t *testing.T) {
	deployments := &fleeetv1.PatchTarget{Kind: "Deployment", Name: "web"}
	cases := []struct {
		name  string
		pkg   fleeetv1.HelmPackage
		drift helmv2.DriftDetection
	}{
		{"defaults", fleeetv1.HelmPackage{}, helmv2.DriftDetection{Mode: helmv2.DriftDetectionEnabled}},
		{"mode unset", fleeetv1.HelmPackage{DriftDetection: &fleeetv1.HelmDriftDetection{}},
			helmv2.DriftDetection{Mode: helmv2.DriftDetectionEnabled}},
		{"warn with ignore rules", fleeetv1.HelmPackage{DriftDetection: &fleeetv1.HelmDriftDetection{Mode: fleeetv1.DriftWarn,
			Ignore: []fleeetv1.HelmDriftIgnoreRule{{Paths: []string{"/spec/replicas"}, Target: deployments}, {Paths: []string{"/metadata/annotations"}}}}},
			helmv2.DriftDetection{Mode: helmv2.DriftDetectionWarn, Ignore: []helmv2.IgnoreRule{
				{Paths: []string{"/spec/replicas"}, Target: &kustomize.Selector{Kind: "Deployment", Name: "web"}},
				{Paths: []string{"/metadata/annotations"}}}}},
		{"disabled", fleeetv1.HelmPackage{DriftDetection: &fleeetv1.HelmDriftDetection{Mode: fleeetv1.DriftDisabled}},
			helmv2.DriftDetection{Mode: helmv2.DriftDetectionDisabled}},
	}
	for _, tc := range cases {
		g := NewWithT(t)
		hr := helmRelease(g, &tc.pkg)
		g.Expect(*hr.Spec.DriftDetection).To(Equal(tc.drift), tc.name)
		g.Expect(hr.Spec.Install.CRDs).To(BeEmpty(), "%s: Flux's CRD defaults unless the sync sets a policy", tc.name)
		g.Expect(hr.Spec.Upgrade.CRDs).To(BeEmpty(), tc.name)
		g.Expect(hr.Spec.Install.CreateNamespace).To(BeFalse(), tc.name)
		g.Expect(hr.Spec.PostRenderers).To(BeEmpty(), tc.name)
		g.Expect(hr.Spec.StorageNamespace).To(BeEmpty(), "%s: the history stays in the HelmRelease's namespace unless the sync says", tc.name)
	}

	g := NewWithT(t)
	patch := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    team: a\n"
	hr := helmRelease(g, &fleeetv1.HelmPackage{CRDs: fleeetv1.CRDsCreateReplace, CreateNamespace: true, StorageNamespace: "fleeet-system",
		PostRenderers: []fleeetv1.KustomizePatch{{Patch: patch, Target: deployments}}})
	g.Expect(hr.Spec.StorageNamespace).To(Equal("fleeet-system"))
	g.Expect(hr.Spec.Install.CRDs).To(Equal(helmv2.CreateReplace))
	g.Expect(hr.Spec.Upgrade.CRDs).To(Equal(helmv2.CreateReplace))
	g.Expect(hr.Spec.Install.CreateNamespace).To(BeTrue())
	g.Expect(hr.Spec.PostRenderers).To(Equal([]helmv2.PostRenderer{{Kustomize: &helmv2.Kustomize{Patches: []kustomize.Patch{
		{Patch: patch, Target: &kustomize.Selector{Kind: "Deployment", Name: "web"}}}}}}))
}

// kustomization expands a kustomize sync of pkg into its Kustomization.
func kustomization(g Gomega, pkg *fleeetv1.KustomizePackage) *kustomizev1.Kustomization {
	return expand(g, fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}},
		Package: fleeetv1.Package{Kustomize: pkg},
	}).Applier.(*kustomizev1.Kustomization)
}

// helmRelease expands a helm sync of pkg into its HelmRelease.
func helmRelease(g Gomega, pkg *fleeetv1.HelmPackage) *helmv2.HelmRelease {
	return expand(g, fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "app", Version: "1.0.0"}},
		Package: fleeetv1.Package{Helm: pkg},
	}).Applier.(*helmv2.HelmRelease)
}
