package flux

import (
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
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
	cases := []struct {
		want    Revision
		applied string
		match   bool
	}{
		{Revision{GitTag: "v1.0.0"}, "v1.0.0@sha1:" + sha, true},
		{Revision{GitTag: "v1.0.0"}, "v1.0.01@sha1:" + sha, false},
		{Revision{GitTag: "v1.0.0"}, "", false},
		{Revision{GitCommit: sha}, "sha1:" + sha, true},
		{Revision{GitCommit: sha}, "main@sha1:" + sha, true},
		{Revision{GitCommit: sha}, "sha1:ffff", false},
		{Revision{ChartVersion: "1.2.3"}, "1.2.3", true},
		{Revision{ChartVersion: "v1.2.3"}, "1.2.3", true},
		{Revision{ChartVersion: "1.2.3"}, "1.2.4", false},
	}
	for _, tc := range cases {
		NewWithT(t).Expect(tc.want.Matches(tc.applied)).To(Equal(tc.match), "%+v vs %q", tc.want, tc.applied)
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
	}

	g := NewWithT(t)
	patch := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    team: a\n"
	hr := helmRelease(g, &fleeetv1.HelmPackage{CRDs: fleeetv1.CRDsCreateReplace, CreateNamespace: true,
		PostRenderers: []fleeetv1.KustomizePatch{{Patch: patch, Target: deployments}}})
	g.Expect(hr.Spec.Install.CRDs).To(Equal(helmv2.CreateReplace))
	g.Expect(hr.Spec.Upgrade.CRDs).To(Equal(helmv2.CreateReplace))
	g.Expect(hr.Spec.Install.CreateNamespace).To(BeTrue())
	g.Expect(hr.Spec.PostRenderers).To(Equal([]helmv2.PostRenderer{{Kustomize: &helmv2.Kustomize{Patches: []kustomize.Patch{
		{Patch: patch, Target: &kustomize.Selector{Kind: "Deployment", Name: "web"}}}}}}))
}

// kustomization expands a kustomize sync of pkg into its Kustomization.
func kustomization(g Gomega, pkg *fleeetv1.KustomizePackage) *kustomizev1.Kustomization {
	sync := &fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}},
		Package: fleeetv1.Package{Kustomize: pkg},
	}}
	x, err := Expand(Target{Owner: "plan", Namespace: "team-a"}, sync, nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	return x.Applier.(*kustomizev1.Kustomization)
}

// helmRelease expands a helm sync of pkg into its HelmRelease.
func helmRelease(g Gomega, pkg *fleeetv1.HelmPackage) *helmv2.HelmRelease {
	sync := &fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "app", Version: "1.0.0"}},
		Package: fleeetv1.Package{Helm: pkg},
	}}
	x, err := Expand(Target{Owner: "plan", Namespace: "team-a"}, sync, nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	return x.Applier.(*helmv2.HelmRelease)
}
