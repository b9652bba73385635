package assemblage_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// privateSources are the servers requiring credentials that the source
// subtests sync from. Each holds podinfo's manifests and the hello chart.
type privateSources struct {
	creds testenv.GitCredentials
	// gitURL is repository podinfo over HTTP, tagged v1.0.0 at gitCommit:
	// deploy/ holds podinfo's manifests and ci.yaml, which is not one and
	// breaks the build unless ignored; charts/hello the hello chart.
	gitURL, gitCommit string
	ssh               *testenv.SSHGitServer
	registry          *testenv.OCIRegistry
	// ociURL holds podinfo's kustomize directory as a Flux artifact
	// tagged 6.9.2 at ociDigest, signed with cosign by cosignKey's private
	// key; otherKey signed something else.
	ociURL, ociDigest   string
	cosignKey, otherKey []byte
	// chartURL holds the hello chart at chartVersion, chartDigest.
	chartURL, chartVersion, chartDigest string
}

// ciFile is a CI pipeline beside the manifests: YAML, not a Kubernetes object.
const ciFile = "deploy/ci.yaml"

func publishPrivateSources(t testing.TB) *privateSources {
	podinfo := testenv.GetPodinfo(t)
	s := &privateSources{creds: testenv.GitCredentials{Username: "fleeet", Password: randomHex(t), Token: randomHex(t)}}
	files := podinfo.Kustomize(t, "deploy", nil)
	// Without a kustomization.yaml Flux applies every YAML file of the path.
	delete(files, "deploy/kustomization.yaml")
	files[ciFile] = "stages: [build, deploy]\n"
	for name, content := range dirFiles(t, testenv.ChartDir("hello"), "charts/hello") {
		files[name] = content
	}
	git := testenv.NewPrivateGitServer(t, s.creds)
	s.gitURL, s.gitCommit = git.Commit(t, "podinfo", files, "v1.0.0")
	s.ssh = git.ServeSSH(t)

	s.registry = testenv.NewPrivateRegistry(t)
	s.ociURL, s.ociDigest = s.registry.PushKustomize(t, "podinfo", "6.9.2", podinfo.Kustomize(t, "", nil))
	s.cosignKey = s.registry.SignCosign(t, "podinfo", s.ociDigest)
	s.otherKey = s.registry.SignCosign(t, "other", s.ociDigest)
	s.chartURL, s.chartVersion, s.chartDigest = s.registry.PushChart(t, "charts", testenv.ChartDir("hello"))
	return s
}

// dirFiles reads every file under dir as path under prefix → content.
func dirFiles(t testing.TB, dir, prefix string) map[string]string {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		content, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		files[filepath.Join(prefix, rel)] = string(content)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func randomHex(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// secret creates a Secret in ns, as the tenant (or sync.secrets) would.
func (e *env) secret(t *testing.T, ns, name string, typ corev1.SecretType, data map[string][]byte) *fleeetv1.LocalObjectReference {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: typ, Data: data}
	NewWithT(t).Expect(e.c.Client.Create(t.Context(), s)).To(Succeed())
	return &fleeetv1.LocalObjectReference{Name: name}
}

// podinfoSync applies podinfo's manifests from src into ns; with no kubelet
// here its pods never run, so the sync does not wait for them.
func podinfoSync(ns, name string, src fleeetv1.Source, path string) fleeetv1.NamedSync {
	return fleeetv1.NamedSync{Name: name, SyncSpec: fleeetv1.SyncSpec{
		Source:  src,
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: path, TargetNamespace: ns, Wait: ptr.To(false)}},
	}}
}

// helloSync installs the hello chart of src.
func helloSync(name string, src fleeetv1.Source, chartPath string) fleeetv1.NamedSync {
	return fleeetv1.NamedSync{Name: name, SyncSpec: fleeetv1.SyncSpec{
		Source: src, Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{Chart: chartPath}},
	}}
}

// gitSource is the podinfo repository at v1.0.0 at url, without ci.yaml.
func (s *privateSources) gitSource(url string, secret *fleeetv1.LocalObjectReference) fleeetv1.Source {
	return fleeetv1.Source{Git: &fleeetv1.GitSource{URL: url, Tag: "v1.0.0", Ignore: ptr.To("/" + ciFile + "\n")}, SecretRef: secret}
}

// expectPodinfo checks podinfo's Deployment was applied into ns.
func (e *env) expectPodinfo(g Gomega, ns string) {
	g.Expect(e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "podinfo"}, &appsv1.Deployment{})).To(Succeed())
}

// helloChartVersion is the chart version the hello release of a sync runs,
// as the chart renders it into its ConfigMap.
func (e *env) helloChartVersion(g Gomega, ns, release string) string {
	var cm corev1.ConfigMap
	g.Expect(e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: release + "-hello"}, &cm)).To(Succeed())
	return cm.Data["chartVersion"]
}

// expectFailedWithout waits until sync name of asm has failed, saying
// something, and checks none of secrets is in its status.
func (e *env) expectFailedWithout(t *testing.T, asm *fleeetv1.Assemblage, name string, secrets ...string) string {
	t.Helper()
	var msg string
	NewWithT(t).Eventually(func(g Gomega) {
		st := e.syncStatus(g, asm, name)
		g.Expect(st.State).To(Equal(fleeetv1.SyncFailed), "%+v", st)
		msg = st.Message
	}, timeout, poll).Should(Succeed())
	g := NewWithT(t)
	g.Expect(msg).To(HavePrefix("source: "))
	current := &fleeetv1.Assemblage{}
	g.Expect(e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(asm), current)).To(Succeed())
	for _, s := range secrets {
		for _, c := range current.Status.Conditions {
			g.Expect(c.Message).NotTo(ContainSubstring(s))
		}
		for _, st := range current.Status.Syncs {
			g.Expect(st.Message).NotTo(ContainSubstring(s))
		}
	}
	t.Logf("%s failed: %s", name, msg)
	return msg
}

// Git over HTTP with basic auth or a bearer token applies podinfo and
// installs a chart from a path of the repository, at the pinned tag; a
// wrong password fails the sync without the password in its status.
func (e *env) testPrivateGitOverHTTP(t *testing.T) {
	g := NewWithT(t)
	s := e.private
	ns := e.c.Namespace(t, "git-http", nil)
	basic := e.secret(t, ns, "git-basic", corev1.SecretTypeOpaque, map[string][]byte{
		"username": []byte(s.creds.Username), "password": []byte(s.creds.Password)})
	token := e.secret(t, ns, "git-token", corev1.SecretTypeOpaque, map[string][]byte{"bearerToken": []byte(s.creds.Token)})
	asm := e.create(t, ns,
		podinfoSync(ns, "basic", s.gitSource(s.gitURL, basic), "./deploy"),
		podinfoSync(ns, "token", s.gitSource(s.gitURL, token), "./deploy"),
		helloSync("chart", s.gitSource(s.gitURL, basic), "charts/hello"),
	)
	done := e.waitReady(t, asm)
	e.expectPodinfo(g, ns)
	// The chart is versioned after the commit the tag names, and the
	// sync is Ready at that commit.
	g.Expect(e.helloChartVersion(g, ns, "chart")).To(Equal("1.2.3+" + s.gitCommit[:12]))
	for _, st := range done.Status.Syncs {
		if st.Name == "chart" {
			g.Expect(st.Revision).To(Equal("1.2.3+" + s.gitCommit[:12]))
		} else {
			g.Expect(st.Revision).To(Equal("v1.0.0@sha1:" + s.gitCommit))
		}
	}

	wrongNS := e.c.Namespace(t, "git-http-wrong", nil)
	wrong := "wrong-" + randomHex(t)
	bad := e.secret(t, wrongNS, "git-basic", corev1.SecretTypeOpaque, map[string][]byte{
		"username": []byte(s.creds.Username), "password": []byte(wrong)})
	good := e.secret(t, wrongNS, "git-good", corev1.SecretTypeOpaque, map[string][]byte{
		"username": []byte(s.creds.Username), "password": []byte(s.creds.Password)})
	unignored := s.gitSource(s.gitURL, good)
	unignored.Git.Ignore = nil
	failing := e.create(t, wrongNS,
		podinfoSync(wrongNS, "basic", s.gitSource(s.gitURL, bad), "./deploy"),
		podinfoSync(wrongNS, "unignored", unignored, "./deploy"))
	msg := e.expectFailedWithout(t, failing, "basic", wrong, s.creds.Password)
	g.Expect(msg).To(ContainSubstring("authentication required"))
	// Without ignore, the CI file beside the manifests breaks the build:
	// what the other syncs' ignore kept out.
	g.Eventually(func(g Gomega) {
		st := e.syncStatus(g, failing, "unignored")
		g.Expect(st.State).To(Equal(fleeetv1.SyncFailed))
		g.Expect(st.Message).To(ContainSubstring("ci.yaml"))
	}, timeout, poll).Should(Succeed())
}

// Git over SSH with a pinned host key applies podinfo; a known_hosts naming
// another key, or none, fails the sync, the private key nowhere in its
// status.
func (e *env) testPrivateGitOverSSH(t *testing.T) {
	g := NewWithT(t)
	s := e.private
	url := s.ssh.URL + "/podinfo.git"
	ns := e.c.Namespace(t, "git-ssh", nil)
	key := e.secret(t, ns, "git-ssh", corev1.SecretTypeOpaque, map[string][]byte{
		"identity": s.ssh.Identity, "known_hosts": []byte(s.ssh.KnownHosts)})
	asm := e.create(t, ns, podinfoSync(ns, "ssh", s.gitSource(url, key), "./deploy"))
	done := e.waitReady(t, asm)
	e.expectPodinfo(g, ns)
	g.Expect(done.Status.Syncs[0].Revision).To(Equal("v1.0.0@sha1:" + s.gitCommit))

	otherNS := e.c.Namespace(t, "git-ssh-other-host", nil)
	host := strings.TrimPrefix(s.ssh.URL, "ssh://git@")
	other := e.secret(t, otherNS, "git-ssh", corev1.SecretTypeOpaque, map[string][]byte{
		"identity": s.ssh.Identity, "known_hosts": []byte(testenv.NewSSHHostKey(t, host))})
	unpinned := e.secret(t, otherNS, "git-ssh-unpinned", corev1.SecretTypeOpaque, map[string][]byte{"identity": s.ssh.Identity})
	failing := e.create(t, otherNS,
		podinfoSync(otherNS, "ssh", s.gitSource(url, other), "./deploy"),
		podinfoSync(otherNS, "unpinned", s.gitSource(url, unpinned), "./deploy"))
	identity := strings.Split(strings.TrimSpace(string(s.ssh.Identity)), "\n")
	msg := e.expectFailedWithout(t, failing, "ssh", identity[1:len(identity)-1]...)
	g.Expect(msg).To(ContainSubstring("knownhosts: key mismatch"))
	// Without known_hosts Flux refuses to connect at all.
	msg = e.expectFailedWithout(t, failing, "unpinned", identity[1:len(identity)-1]...)
	g.Expect(msg).To(ContainSubstring("'known_hosts' is required"))
}

// An OCI registry requiring credentials, over TLS with its own CA, serves
// podinfo's manifests at a tag, at a digest and with its cosign signature
// verified, and the hello chart through an OCIRepository and through an
// oci:// HelmRepository; wrong credentials fail the sync without the
// password in its status, and a signature by another key fails it too.
func (e *env) testPrivateOCIRegistry(t *testing.T) {
	g := NewWithT(t)
	s, r := e.private, e.private.registry
	ns := e.c.Namespace(t, "oci", nil)
	pull := e.secret(t, ns, "registry", corev1.SecretTypeDockerConfigJson, map[string][]byte{
		corev1.DockerConfigJsonKey: r.DockerConfigJSON(t, r.Password)})
	ca := e.secret(t, ns, "registry-ca", corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": r.CA})
	oci := func(url, tag, digest string) fleeetv1.Source {
		return fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: url, Tag: tag, Digest: digest}, SecretRef: pull, CertSecretRef: ca}
	}
	keys := e.secret(t, ns, "cosign-keys", corev1.SecretTypeOpaque, map[string][]byte{"cosign.pub": s.cosignKey})
	signed := oci(s.ociURL, "", s.ociDigest)
	signed.OCI.Verify = &fleeetv1.OCIVerification{SecretRef: *keys}
	asm := e.create(t, ns,
		podinfoSync(ns, "tag", oci(s.ociURL, "6.9.2", ""), "./"),
		podinfoSync(ns, "digest", oci(s.ociURL, "", s.ociDigest), "./"),
		podinfoSync(ns, "signed", signed, "./"),
		helloSync("chart", oci(s.chartURL, s.chartVersion, ""), ""),
		helloSync("repository", fleeetv1.Source{
			Helm:      &fleeetv1.HelmSource{URL: strings.TrimSuffix(s.chartURL, "/hello"), Chart: "hello", Version: s.chartVersion},
			SecretRef: pull, CertSecretRef: ca,
		}, ""),
	)
	done := e.waitReady(t, asm)
	e.expectPodinfo(g, ns)
	revisions := map[string]string{}
	for _, st := range done.Status.Syncs {
		revisions[st.Name] = st.Revision
	}
	digest12 := strings.TrimPrefix(s.chartDigest, "sha256:")[:12]
	g.Expect(revisions).To(Equal(map[string]string{
		"tag":        "6.9.2@" + s.ociDigest,
		"digest":     s.ociDigest,
		"signed":     s.ociDigest,
		"chart":      s.chartVersion + "+" + digest12 + "@" + s.chartDigest,
		"repository": s.chartVersion,
	}))
	g.Expect(e.helloChartVersion(g, ns, "chart")).To(Equal(s.chartVersion + "+" + digest12))
	g.Expect(e.helloChartVersion(g, ns, "repository")).To(Equal(s.chartVersion))

	wrongNS := e.c.Namespace(t, "oci-wrong", nil)
	wrong := "wrong-" + randomHex(t)
	bad := e.secret(t, wrongNS, "registry", corev1.SecretTypeDockerConfigJson, map[string][]byte{
		corev1.DockerConfigJsonKey: r.DockerConfigJSON(t, wrong)})
	badCA := e.secret(t, wrongNS, "registry-ca", corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": r.CA})
	good := e.secret(t, wrongNS, "registry-good", corev1.SecretTypeDockerConfigJson, map[string][]byte{
		corev1.DockerConfigJsonKey: r.DockerConfigJSON(t, r.Password)})
	otherKeys := e.secret(t, wrongNS, "cosign-keys", corev1.SecretTypeOpaque, map[string][]byte{"cosign.pub": s.otherKey})
	failing := e.create(t, wrongNS,
		podinfoSync(wrongNS, "tag", fleeetv1.Source{
			OCI: &fleeetv1.OCISource{URL: s.ociURL, Tag: "6.9.2"}, SecretRef: bad, CertSecretRef: badCA}, "./"),
		podinfoSync(wrongNS, "forged", fleeetv1.Source{
			OCI:       &fleeetv1.OCISource{URL: s.ociURL, Digest: s.ociDigest, Verify: &fleeetv1.OCIVerification{SecretRef: *otherKeys}},
			SecretRef: good, CertSecretRef: badCA}, "./"))
	msg := e.expectFailedWithout(t, failing, "tag", wrong, r.Password)
	g.Expect(msg).To(ContainSubstring("401 Unauthorized"))
	msg = e.expectFailedWithout(t, failing, "forged", r.Password)
	g.Expect(msg).To(ContainSubstring("signature"))
}
