package assemblage

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestObjectNamesAreStableShortAndCollisionFree(t *testing.T) {
	g := NewWithT(t)
	g.Expect(objectName("a-b", "c")).NotTo(Equal(objectName("a", "b-c")))
	g.Expect(objectName("plan", "app")).To(Equal(objectName("plan", "app")))
	long := objectName("plan", "a-very-long-sync-name-that-goes-on-and-on-beyond-sixty-three-chars")
	g.Expect(len(long)).To(BeNumerically("<=", 63))
	g.Expect(long).To(MatchRegexp(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`))
}

func TestRevisionMatchesWhatFluxReports(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef01234567"
	cases := []struct {
		want    revision
		applied string
		match   bool
	}{
		{revision{gitTag: "v1.0.0"}, "v1.0.0@sha1:" + sha, true},
		{revision{gitTag: "v1.0.0"}, "v1.0.01@sha1:" + sha, false},
		{revision{gitTag: "v1.0.0"}, "", false},
		{revision{gitCommit: sha}, "sha1:" + sha, true},
		{revision{gitCommit: sha}, "main@sha1:" + sha, true},
		{revision{gitCommit: sha}, "sha1:ffff", false},
		{revision{chartVersion: "1.2.3"}, "1.2.3", true},
		{revision{chartVersion: "v1.2.3"}, "1.2.3", true},
		{revision{chartVersion: "1.2.3"}, "1.2.4", false},
	}
	for _, tc := range cases {
		NewWithT(t).Expect(tc.want.matches(tc.applied)).To(Equal(tc.match), "%+v vs %q", tc.want, tc.applied)
	}
}
