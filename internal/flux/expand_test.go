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
		sync := &fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
			Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}},
			Package: fleeetv1.Package{Kustomize: &tc.pkg},
		}}
		x, err := Expand(Target{Owner: "plan", Namespace: "team-a"}, sync, nil, nil)
		g.Expect(err).NotTo(HaveOccurred())
		ks := x.Applier.(*kustomizev1.Kustomization)
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
		sync := &fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
			Source:  fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "app", Version: "1.0.0"}},
			Package: fleeetv1.Package{Helm: &tc.pkg},
		}}
		x, err := Expand(Target{Owner: "plan", Namespace: "team-a"}, sync, nil, nil)
		g.Expect(err).NotTo(HaveOccurred())
		hr := x.Applier.(*helmv2.HelmRelease)
		g.Expect(hr.Spec.Timeout).To(Equal(&metav1.Duration{Duration: tc.timeout}), tc.name)
		g.Expect(hr.Spec.Install.Strategy.Name).To(Equal(remediate), "%s: remediation applies even under DefaultToRetryOnFailure", tc.name)
		g.Expect(hr.Spec.Upgrade.Strategy.Name).To(Equal(remediate), tc.name)
		g.Expect(*hr.Spec.Install.Remediation).To(Equal(tc.install), tc.name)
		g.Expect(*hr.Spec.Upgrade.Remediation).To(Equal(tc.upgrade), tc.name)
		g.Expect(hr.Spec.Install.Remediation.MustRemediateLastFailure()).To(BeFalse(), "%s: a failed install stays to be looked at", tc.name)
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
