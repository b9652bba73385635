package flux

import (
	"testing"

	. "github.com/onsi/gomega"
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
