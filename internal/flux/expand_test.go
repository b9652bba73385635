package flux

import (
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	. "github.com/onsi/gomega"

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
