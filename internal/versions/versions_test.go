package versions

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
	. "github.com/onsi/gomega"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestPickTakesTheHighestAllowedVersionAsTheSourceNamesIt(t *testing.T) {
	g := NewWithT(t)
	offered := []string{"v1.0.0", "1.1.0", "v1.2.0-rc.1", "v1.10.0", "v2.0.0", "stable", "v1.9.9"}
	for constraint, want := range map[string]string{
		"^1": "v1.10.0", "~1.1": "1.1.0", ">=1.2.0-rc.0 <1.3": "v1.2.0-rc.1", ">=2": "v2.0.0", "<1.1": "v1.0.0",
	} {
		c, err := semver.NewConstraint(constraint)
		g.Expect(err).NotTo(HaveOccurred())
		got, ok := Pick(offered, c, nil)
		g.Expect(ok).To(BeTrue(), constraint)
		g.Expect(got).To(Equal(want), constraint)
	}
	c, _ := semver.NewConstraint("^1")
	got, _ := Pick(offered, c, []string{"v1.10.0"})
	g.Expect(got).To(Equal("v1.9.9"), "a skipped version gives way to the next highest")
	_, ok := Pick(offered, c, []string{"v1.10.0", "v1.9.9", "1.1.0", "v1.0.0"})
	g.Expect(ok).To(BeFalse())
}

func TestRolledBackListsEachRolledBackVersionOnceNewestFirst(t *testing.T) {
	h := []fleeetv1.RolloutRecord{
		{Version: "v3", Outcome: fleeetv1.RolloutRolledBack}, {Version: "v2", Outcome: fleeetv1.RolloutSucceeded},
		{Version: "v3", Outcome: fleeetv1.RolloutRolledBack}, {Version: "v1", Outcome: fleeetv1.RolloutRolledBack},
	}
	NewWithT(t).Expect(RolledBack(h, 10)).To(Equal([]string{"v3", "v1"}))
	NewWithT(t).Expect(RolledBack(h, 1)).To(Equal([]string{"v3"}))
}

// advertisement is a git-upload-pack ref advertisement as git
// http-backend writes it: a service line, a flush, the refs (capabilities
// after a NUL on the first, annotated tags peeled with ^{}), a flush.
func advertisement(refs ...string) string {
	pkt := func(s string) string { return strings.ToLower(hex4(len(s)+4)) + s }
	out := pkt("# service=git-upload-pack\n") + "0000"
	for i, ref := range refs {
		line := strings.Repeat("a", 40) + " " + ref
		if i == 0 {
			line += "\x00multi_ack thin-pack"
		}
		out += pkt(line + "\n")
	}
	return out + "0000"
}

func hex4(n int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[n>>12&15], digits[n>>8&15], digits[n>>4&15], digits[n&15]})
}

func TestGitTagsReadsTheRefAdvertisement(t *testing.T) {
	g := NewWithT(t)
	body := advertisement("HEAD", "refs/heads/main", "refs/tags/v1.0.0", "refs/tags/v1.1.0", "refs/tags/v1.1.0^{}", "refs/pull/1/head")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.Expect(r.URL.Path).To(Equal("/app.git/info/refs"))
		g.Expect(r.URL.Query().Get("service")).To(Equal("git-upload-pack"))
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	tags, err := gitTags(context.Background(), srv.Client(), srv.URL+"/app.git")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tags).To(Equal([]string{"v1.0.0", "v1.1.0"}))
}

func TestAnAnswerThatIsNotARefAdvertisementIsAnError(t *testing.T) {
	g := NewWithT(t)
	for name, body := range map[string]string{
		"html":      "<html>login</html>",
		"truncated": "00ff# service",
		"tiny":      "0003",
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
		_, err := gitTags(context.Background(), srv.Client(), srv.URL+"/app.git")
		srv.Close()
		g.Expect(err).To(HaveOccurred(), name)
	}
}

func TestChartVersionsReadsTheIndexAndNamesAMissingChart(t *testing.T) {
	g := NewWithT(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.Expect(r.URL.Path).To(Equal("/charts/index.yaml"))
		_, _ = w.Write([]byte("apiVersion: v1\nentries:\n  app:\n  - version: 1.0.0\n  - version: 1.2.0\n  other:\n  - version: 9.0.0\n"))
	}))
	defer srv.Close()
	got, err := chartVersions(context.Background(), srv.Client(), srv.URL+"/charts/", "app")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(ConsistOf("1.0.0", "1.2.0"))
	_, err = chartVersions(context.Background(), srv.Client(), srv.URL+"/charts", "missing")
	g.Expect(err).To(MatchError(ContainSubstring(`has no chart "missing"`)))
}

func TestAnAnswerOverTheLimitIsRefusedNotRead(t *testing.T) {
	g := NewWithT(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := []byte(strings.Repeat("x", 1<<20))
		for range maxBody>>20 + 1 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	_, err := get(context.Background(), srv.Client(), srv.URL+"/index.yaml?token=secret")
	g.Expect(err).To(MatchError(HaveSuffix("the answer is over 64 MiB")))
	g.Expect(err.Error()).NotTo(ContainSubstring("secret"), "a query never shows in an error")
}

func TestUnsupportedSourcesAreNamedByField(t *testing.T) {
	g := NewWithT(t)
	for src, want := range map[*fleeetv1.Source]string{
		{Git: &fleeetv1.GitSource{URL: "https://x/a.git", Tag: "v1"}}:                                                       "",
		{Helm: &fleeetv1.HelmSource{URL: "https://x", Chart: "a", Version: "1.0.0"}}:                                        "",
		{Git: &fleeetv1.GitSource{URL: "ssh://git@x/a.git", Tag: "v1"}}:                                                     "spec.sync.source.git.url",
		{Git: &fleeetv1.GitSource{URL: "https://x/a.git", Revision: strings.Repeat("a", 40)}}:                               "spec.sync.source.git.revision",
		{Helm: &fleeetv1.HelmSource{URL: "oci://x/charts", Chart: "a", Version: "1.0.0"}}:                                   "",
		{OCI: &fleeetv1.OCISource{URL: "oci://x/a", Tag: "1.0.0"}}:                                                          "",
		{Helm: &fleeetv1.HelmSource{URL: "s3://x/charts", Chart: "a", Version: "1.0.0"}}:                                    "spec.sync.source.helm.url",
		{OCI: &fleeetv1.OCISource{URL: "oci://x/a", Digest: "sha256:" + strings.Repeat("a", 64)}}:                           "spec.sync.source.oci.digest",
		{Git: &fleeetv1.GitSource{URL: "https://x/a.git", Tag: "v1"}, SecretRef: &fleeetv1.LocalObjectReference{Name: "s"}}: "spec.sync.source.secretRef",
	} {
		if want == "" {
			g.Expect(Unsupported(*src)).To(BeEmpty())
			continue
		}
		g.Expect(Unsupported(*src)).To(HavePrefix(want + ": "))
	}
}

func TestGitRefReadsTheCommitOfANamedRef(t *testing.T) {
	g := NewWithT(t)
	body := advertisement("HEAD", "refs/heads/main", "refs/tags/v1.0.0")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	commit, err := GitRef(context.Background(), srv.Client(), srv.URL+"/app.git", "refs/heads/main")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(commit).To(Equal(strings.Repeat("a", 40)))
	_, err = GitRef(context.Background(), srv.Client(), srv.URL+"/app.git", "refs/heads/gone")
	g.Expect(err).To(MatchError(ContainSubstring("has no ref refs/heads/gone")))
}
