package versions_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/versions"
)

// A public registry's tags are read with the anonymous token its token
// service gives, for an OCI artifact and for a chart in an oci:// Helm
// repository alike.
func TestOCITagsAreReadFromAPublicRegistryWithAnAnonymousToken(t *testing.T) {
	g := NewWithT(t)
	reg := testenv.NewPublicRegistry(t)
	var url string
	for _, tag := range []string{"1.0.0", "1.2.0", "2.0.0-rc.1", "stable"} {
		url, _ = reg.PushKustomize(t, "team/manifests", tag, map[string]string{"cm.yaml": "kind: ConfigMap"})
	}
	charts, version, _ := reg.PushChart(t, "charts", testenv.ChartDir("hello"))
	c := &http.Client{Transport: reg.Transport()}

	tags, err := versions.List(t.Context(), c, fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: url, Tag: "1.0.0"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tags).To(ConsistOf("1.0.0", "1.2.0", "2.0.0-rc.1", "stable"))

	chart := fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: charts[:len(charts)-len("/hello")], Chart: "hello", Version: version}}
	g.Expect(versions.Unsupported(chart)).To(BeEmpty())
	g.Expect(versions.List(t.Context(), c, chart)).To(ConsistOf(version))
}

// A registry that asks for credentials is not sent any: the manager reads
// public sources only.
func TestAPrivateRegistryIsNotSentCredentials(t *testing.T) {
	g := NewWithT(t)
	reg := testenv.NewPrivateRegistry(t)
	url, _ := reg.PushKustomize(t, "team/manifests", "1.0.0", map[string]string{"cm.yaml": "kind: ConfigMap"})
	_, err := versions.List(t.Context(), &http.Client{Transport: reg.Transport()}, fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: url, Tag: "1.0.0"}})
	g.Expect(err).To(MatchError(ContainSubstring("the registry asks for credentials; the manager reads public sources only")))
}

// Tags are read page by page as the Link header says, and a next page on
// another server is refused.
func TestOCITagsFollowTheRegistrysPagesOnItsOwnServerOnly(t *testing.T) {
	g := NewWithT(t)
	elsewhere := "http://other.example/v2/app/tags/list?last=b"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("last") == "" {
			w.Header().Set("Link", `</v2/app/tags/list?n=2&last=1.1.0>; rel="next"`)
			w.Write([]byte(`{"name":"app","tags":["1.0.0","1.1.0"]}`))
			return
		}
		w.Write([]byte(`{"name":"app","tags":["1.2.0"]}`))
	}))
	defer srv.Close()
	src := fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: "oci://" + srv.Listener.Addr().String() + "/app", Tag: "1.0.0", Insecure: true}}
	g.Expect(versions.List(t.Context(), srv.Client(), src)).To(Equal([]string{"1.0.0", "1.1.0", "1.2.0"}))

	away := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "<"+elsewhere+`>; rel="next"`)
		w.Write([]byte(`{"name":"app","tags":["1.0.0"]}`))
	}))
	defer away.Close()
	src.OCI.URL = "oci://" + away.Listener.Addr().String() + "/app"
	_, err := versions.List(t.Context(), away.Client(), src)
	g.Expect(err).To(MatchError(ContainSubstring("the next page is on another server (other.example)")))
}

// A digest-follow reads the digest its tag names now, and the next one
// once the tag moves.
func TestADigestFollowReadsTheDigestItsTagNamesNow(t *testing.T) {
	g := NewWithT(t)
	reg := testenv.NewPublicRegistry(t)
	url, first := reg.PushKustomize(t, "team/manifests", "stable", map[string]string{"cm.yaml": "kind: ConfigMap"})
	c := &http.Client{Transport: reg.Transport()}
	p := &fleeetv1.VersionPolicy{DigestOf: "stable"}
	src := fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: url, Tag: "1.0.0"}}
	g.Expect(versions.Check(p, src)).To(BeEmpty())
	g.Expect(versions.Offered(t.Context(), c, p, src)).To(Equal([]string{first}))

	_, second := reg.PushKustomize(t, "team/manifests", "stable", map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata: {name: b}"})
	g.Expect(second).NotTo(Equal(first))
	g.Expect(versions.Offered(t.Context(), c, p, src)).To(Equal([]string{second}))

	versions.Set(&src, second)
	g.Expect(src.OCI).To(HaveField("Tag", BeEmpty()))
	g.Expect(src.OCI).To(HaveField("Digest", second))
	g.Expect(versions.Current(src)).To(Equal(second))

	g.Expect(versions.Check(p, fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://x/a.git", Tag: "v1"}, SecretRef: &fleeetv1.LocalObjectReference{Name: "git"}})).To(
		ConsistOf(HavePrefix("spec.versionPolicy.digestOf: "), HavePrefix("spec.sync.source.secretRef: ")), "every problem, not the first")
	_, err := versions.Offered(t.Context(), c, &fleeetv1.VersionPolicy{DigestOf: "missing"}, src)
	g.Expect(err).To(MatchError(ContainSubstring("404")))
}
