package versions_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/versions"
	"github.com/fleeet-dev/fleeet/internal/network"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
	// every is how often the controller under test looks at sources.
	every = time.Second
)

// cluster is the management apiserver the package's tests share, with only
// the version policy controller running: the tests play the Module
// controller where they need its status (history) and read what the
// version controller writes.
var cluster *testenv.Cluster

// registryCAs are the CAs of the OCI registries tests start, which the
// controller's client trusts; a test adds its registry's before use.
var registryCAs = x509.NewCertPool()

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, nil, func(c *testenv.Cluster) (func(bool), error) {
		return testenv.StartManager(c, "versions", func(_ context.Context, mgr ctrl.Manager) error {
			return (&versions.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-manager"), Every: every,
				HTTP: &http.Client{Transport: &http.Transport{DialContext: network.Policy{}.Dialer(),
					TLSClientConfig: &tls.Config{RootCAs: registryCAs, MinVersion: tls.VersionTLS12}}}}).SetupWithManager(mgr)
		})
	}))
}

// newModule creates a Module in a fresh tenant namespace following source
// under the policy semver.
func newModule(t *testing.T, source fleeetv1.Source, semver string, pkg ...fleeetv1.Package) *fleeetv1.Module {
	t.Helper()
	ns := cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	m := fleettest.NewModule("v0.0.0", &metav1.LabelSelector{})
	m.Name, m.Namespace = "app", ns
	m.Spec.Sync.Source = source
	if len(pkg) > 0 {
		m.Spec.Sync.Package = pkg[0]
	}
	m.Spec.VersionPolicy = &fleeetv1.VersionPolicy{Semver: semver}
	NewWithT(t).Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	return m
}

// resolved reads m again and returns its VersionResolved condition.
func resolved(g Gomega, m *fleeetv1.Module) *metav1.Condition {
	g.Expect(cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(m), m)).To(Succeed())
	c := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.VersionResolvedCondition)
	g.Expect(c).NotTo(BeNil())
	return c
}

func gitSource(url, tag string) fleeetv1.Source {
	return fleeetv1.Source{Git: &fleeetv1.GitSource{URL: url, Tag: tag}}
}

// TestAPolicyPicksTheHighestTagItAllowsAndFollowsNewOnes: of the tags a
// real git server offers, the highest the constraint allows is written into
// the sync as an exact tag (pre-releases, other majors and tags that are
// not versions passed over), recorded with an event, and a tag pushed
// later is picked at the next look.
func TestAPolicyPicksTheHighestTagItAllowsAndFollowsNewOnes(t *testing.T) {
	g := NewWithT(t)
	git := testenv.NewGitServer(t)
	for _, tag := range []string{"v1.0.0", "v1.1.0", "v1.2.0-rc.1", "v2.0.0", "stable"} {
		git.Commit(t, "app", map[string]string{"app/" + tag + ".yaml": "kind: ConfigMap\n"}, tag)
	}
	url, _ := git.Commit(t, "app", map[string]string{"README": "x"}, "")
	m := newModule(t, gitSource(url, "v1.0.0"), "^1")

	g.Eventually(func(g Gomega) {
		c := resolved(g, m)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonVersionPicked))
		g.Expect(c.ObservedGeneration).To(Equal(m.Generation))
		g.Expect(m.Spec.Sync.Source.Git.Tag).To(Equal("v1.1.0"))
		g.Expect(m.Status.VersionPolicy.Picked).To(Equal("v1.1.0"))
		g.Expect(m.Status.VersionPolicy.Available).To(Equal("v1.1.0"))
		g.Expect(m.Status.VersionPolicy.PickedAt).NotTo(BeNil())
		g.Expect(c.Message).To(ContainSubstring(`the sync holds v1.1.0, the highest version of ` + url + ` satisfying "^1"`))
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(fleettest.Notes(g, cluster.Client, m, "Normal", fleeetv1.ReasonVersionPicked)).To(ConsistOf(
			"Picked v1.1.0, the highest version of " + url + ` satisfying "^1" (was v1.0.0)`))
	}, timeout, poll).Should(Succeed())

	git.Commit(t, "app", map[string]string{"app/next.yaml": "kind: ConfigMap\n"}, "v1.3.0")
	g.Eventually(func(g Gomega) {
		resolved(g, m)
		g.Expect(m.Spec.Sync.Source.Git.Tag).To(Equal("v1.3.0"))
		g.Expect(m.Status.VersionPolicy.Picked).To(Equal("v1.3.0"))
	}, timeout, poll).Should(Succeed())
}

// TestARolledBackVersionIsNotPickedAgainUntilANewerOneAppears: a version
// the Module's history records as rolled back stays where the rollout left
// it, is not picked again when the sync is set back by hand, and gives way
// to a newer version once the source offers one.
func TestARolledBackVersionIsNotPickedAgainUntilANewerOneAppears(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	git := testenv.NewGitServer(t)
	git.Commit(t, "app", map[string]string{"a.yaml": "kind: ConfigMap\n"}, "v1.1.0")
	url, _ := git.Commit(t, "app", map[string]string{"b.yaml": "kind: ConfigMap\n"}, "v1.2.0")
	m := newModule(t, gitSource(url, "v1.1.0"), "~1")
	g.Eventually(func(g Gomega) {
		resolved(g, m)
		g.Expect(m.Spec.Sync.Source.Git.Tag).To(Equal("v1.2.0"))
	}, timeout, poll).Should(Succeed())

	// The Module controller rolls v1.2.0 back, as a failing rollout makes it.
	g.Expect(testenv.ChangeStatus(ctx, cluster.Client, m, func(m *fleeetv1.Module) {
		m.Status.History = append(m.Status.History, fleeetv1.RolloutRecord{Revision: "r2", Version: "v1.2.0",
			Outcome: fleeetv1.RolloutRolledBack, Time: metav1.Now(), Sync: m.Spec.Sync})
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := resolved(g, m)
		g.Expect(m.Status.VersionPolicy.Skipped).To(Equal([]string{"v1.2.0"}))
		g.Expect(c.Message).To(ContainSubstring("the sync holds v1.2.0, which was rolled back; v1.1.0"))
		g.Expect(m.Spec.Sync.Source.Git.Tag).To(Equal("v1.2.0"), "the rollout holds the Remotes back; the sync is left as it is")
	}, timeout, poll).Should(Succeed())

	// Set back by hand: v1.2.0 is not picked again.
	g.Expect(testenv.Change(ctx, cluster.Client, m, func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v1.1.0" })).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := resolved(g, m)
		g.Expect(c.ObservedGeneration).To(Equal(m.Generation))
		g.Expect(c.Message).To(ContainSubstring(`the sync holds v1.1.0, the highest version of ` + url + ` satisfying "~1", skipping v1.2.0 (rolled back)`))
	}, timeout, poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		resolved(g, m)
		g.Expect(m.Spec.Sync.Source.Git.Tag).To(Equal("v1.1.0"))
	}, 4*every, poll).Should(Succeed())

	git.Commit(t, "app", map[string]string{"c.yaml": "kind: ConfigMap\n"}, "v1.2.1")
	g.Eventually(func(g Gomega) {
		resolved(g, m)
		g.Expect(m.Spec.Sync.Source.Git.Tag).To(Equal("v1.2.1"))
	}, timeout, poll).Should(Succeed())
	g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
	g.Expect(m.Status.VersionPolicy.Skipped).To(Equal([]string{"v1.2.0"}))
}

// TestASourceThatCannotBeReadChangesNothing: a repository the server does
// not have, and one offering nothing the policy allows, leave the sync at
// its version and say why in a False condition and a warning event.
func TestASourceThatCannotBeReadChangesNothing(t *testing.T) {
	g := NewWithT(t)
	git := testenv.NewGitServer(t)
	url, _ := git.Commit(t, "app", map[string]string{"a.yaml": "kind: ConfigMap\n"}, "v1.0.0")

	missing := newModule(t, gitSource(git.URL+"/nothing.git", "v1.0.0"), "^1")
	outOfRange := newModule(t, gitSource(url, "v1.0.0"), "^3")
	for m, reason := range map[*fleeetv1.Module]string{missing: fleeetv1.ReasonSourceUnreadable, outOfRange: fleeetv1.ReasonNoVersionInRange} {
		g.Eventually(func(g Gomega) {
			c := resolved(g, m)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(reason))
			g.Expect(c.Message).To(HaveSuffix("; the sync keeps v1.0.0"))
			g.Expect(fleettest.Notes(g, cluster.Client, m, "Warning", reason)).To(ConsistOf(c.Message))
		}, timeout, poll).Should(Succeed())
		g.Expect(m.Spec.Sync.Source.Git.Tag).To(Equal("v1.0.0"))
		g.Expect(m.Generation).To(Equal(int64(1)))
	}
	g.Expect(resolved(g, missing).Message).To(HavePrefix("reading the versions of " + git.URL + "/nothing.git: GET " + git.URL + "/nothing.git/info/refs: 404"))
	g.Expect(resolved(g, outOfRange).Message).To(Equal(url + ` offers no version satisfying "^3"; the sync keeps v1.0.0`))
}

// TestAPolicyPicksAChartVersionFromARealHelmRepository: a Helm repository
// packaged and indexed by the helm CLI; the policy reads its index.
func TestAPolicyPicksAChartVersionFromARealHelmRepository(t *testing.T) {
	g := NewWithT(t)
	repo := testenv.NewChartRepo(t, testenv.ChartDir("hello"))
	m := newModule(t, fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: repo.URL, Chart: "hello", Version: "1.0.0"}}, ">=1.0.0 <2",
		fleeetv1.Package{Helm: &fleeetv1.HelmPackage{}})
	g.Eventually(func(g Gomega) {
		c := resolved(g, m)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		g.Expect(m.Spec.Sync.Source.Helm.Version).To(Equal("1.2.3"))
	}, timeout, poll).Should(Succeed())
}

// publicRegistry starts a public OCI registry the controller trusts.
func publicRegistry(t *testing.T) *testenv.OCIRegistry {
	reg := testenv.NewPublicRegistry(t)
	NewWithT(t).Expect(registryCAs.AppendCertsFromPEM(reg.CA)).To(BeTrue())
	return reg
}

// TestAPolicyPicksATagFromAPublicOCIRegistry: the tags of an OCI artifact
// in a registry anyone may pull from (read with its anonymous token) are
// versions like git tags; the highest the constraint allows is written
// into the sync.
func TestAPolicyPicksATagFromAPublicOCIRegistry(t *testing.T) {
	g := NewWithT(t)
	reg := publicRegistry(t)
	var url string
	for _, tag := range []string{"1.0.0", "1.4.0", "2.0.0", "stable"} {
		url, _ = reg.PushKustomize(t, "team/manifests", tag, map[string]string{"cm.yaml": "kind: ConfigMap"})
	}
	m := newModule(t, fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: url, Tag: "1.0.0"}}, "^1.0.0")
	g.Eventually(func(g Gomega) {
		c := resolved(g, m)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		g.Expect(m.Spec.Sync.Source.OCI.Tag).To(Equal("1.4.0"))
	}, timeout, poll).Should(Succeed())
}

// TestADigestFollowPinsTheDigestItsTagNamesAndFollowsIt: the sync names the
// digest its tag holds, in place of the tag it named, and the next digest
// once the tag moves.
func TestADigestFollowPinsTheDigestItsTagNamesAndFollowsIt(t *testing.T) {
	g := NewWithT(t)
	reg := publicRegistry(t)
	url, first := reg.PushKustomize(t, "team/manifests", "stable", map[string]string{"cm.yaml": "kind: ConfigMap"})
	ns := cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	m := fleettest.NewModule("v0.0.0", &metav1.LabelSelector{})
	m.Name, m.Namespace = "app", ns
	m.Spec.Sync.Source = fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: url, Tag: "stable-at-start"}}
	m.Spec.VersionPolicy = &fleeetv1.VersionPolicy{DigestOf: "stable"}
	g.Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	pinned := func(digest string) func(Gomega) {
		return func(g Gomega) {
			c := resolved(g, m)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			g.Expect(m.Spec.Sync.Source.OCI).To(Equal(&fleeetv1.OCISource{URL: url, Digest: digest}))
			g.Expect(m.Status.VersionPolicy.Picked).To(Equal(digest))
		}
	}
	g.Eventually(pinned(first), timeout, poll).Should(Succeed())

	_, second := reg.PushKustomize(t, "team/manifests", "stable", map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata: {name: b}"})
	g.Eventually(pinned(second), timeout, poll).Should(Succeed())
}

// TestTakingThePolicyAwayClearsWhatItReported: without spec.versionPolicy the
// Module's status says nothing of one.
func TestTakingThePolicyAwayClearsWhatItReported(t *testing.T) {
	g := NewWithT(t)
	git := testenv.NewGitServer(t)
	url, _ := git.Commit(t, "app", map[string]string{"a.yaml": "kind: ConfigMap\n"}, "v1.0.0")
	m := newModule(t, gitSource(url, "v1.0.0"), "^1")
	g.Eventually(func(g Gomega) { resolved(g, m) }, timeout, poll).Should(Succeed())
	g.Expect(testenv.Change(t.Context(), cluster.Client, m, func(m *fleeetv1.Module) { m.Spec.VersionPolicy = nil })).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.VersionPolicy).To(BeNil())
		g.Expect(apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.VersionResolvedCondition)).To(BeNil())
	}, timeout, poll).Should(Succeed())
}
