package testenv_test

import (
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

func TestTwoClustersAreSeparateAndServeFleeetAndFluxKinds(t *testing.T) {
	g := NewWithT(t)
	clusters := testenv.StartClusters(t, []string{"management", "downstream"})
	mgmt, down := clusters[0], clusters[1]

	for _, c := range clusters {
		for _, crd := range []string{"modules.fleeet.dev", "assemblages.fleeet.dev",
			"gitrepositories.source.toolkit.fluxcd.io", "kustomizations.kustomize.toolkit.fluxcd.io",
			"helmrepositories.source.toolkit.fluxcd.io", "helmreleases.helm.toolkit.fluxcd.io"} {
			var got apiextensionsv1.CustomResourceDefinition
			g.Expect(c.Client.Get(t.Context(), client.ObjectKey{Name: crd}, &got)).To(Succeed(), "%s in %s", crd, c.Name)
		}
	}

	ns := "tenant-a"
	for _, c := range clusters {
		g.Expect(c.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Namespace: ns}}
	g.Expect(mgmt.Client.Create(t.Context(), remote)).To(Succeed())

	err := down.Client.Get(t.Context(), client.ObjectKeyFromObject(remote), &fleeetv1.Remote{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the downstream apiserver must not see the management Remote: %v", err)

	// A management cluster replaced by a new one at the same address: its
	// objects are gone, the CRDs are there, tokens of the old one fail.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}}
	g.Expect(mgmt.Client.Create(t.Context(), sa)).To(Succeed())
	token, err := credential.Mint(t.Context(), mgmt.Client, ns, sa.Name, time.Hour, nil)
	g.Expect(err).NotTo(HaveOccurred())
	host := mgmt.Config.Host
	mgmt.Replace(t)
	g.Expect(mgmt.Config.Host).To(Equal(host))
	err = mgmt.Client.Get(t.Context(), client.ObjectKeyFromObject(remote), &fleeetv1.Remote{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the new cluster starts empty: %v", err)
	g.Expect(mgmt.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Expect(mgmt.Client.Create(t.Context(), &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Namespace: ns}})).To(Succeed(), "with fleeet's CRDs")
	old := rest.CopyConfig(mgmt.Config)
	old.TLSClientConfig = rest.TLSClientConfig{CAData: mgmt.Config.CAData}
	old.BearerToken = token.Value
	stale, err := client.New(old, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	err = stale.List(t.Context(), &corev1.ConfigMapList{}, client.InNamespace(ns))
	g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "a token of the old cluster is rejected: %v", err)
}

func TestFluxControllersSyncFromLocalGitServerAndChartRepo(t *testing.T) {
	c := testenv.StartCluster(t, "downstream")
	testenv.StartFlux(t, c, testenv.SourceController, testenv.KustomizeController, testenv.HelmController)
	ns := c.Namespace(t, "flux", nil)
	interval := metav1.Duration{Duration: time.Minute}

	t.Run("GitRepositoryAndKustomizationAtTag", func(t *testing.T) {
		g := NewWithT(t)
		git := testenv.NewGitServer(t)
		url, commit := git.Commit(t, "platform", map[string]string{
			"deploy/kustomization.yaml": "resources: [configmap.yaml]\n",
			"deploy/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: platform\n" +
				"data:\n  version: v1.0.0\n",
		}, "v1.0.0")

		repo := &sourcev1.GitRepository{
			ObjectMeta: metav1.ObjectMeta{Name: "platform", Namespace: ns},
			Spec: sourcev1.GitRepositorySpec{
				URL: url, Interval: interval,
				Reference: &sourcev1.GitRepositoryRef{Tag: "v1.0.0"},
			},
		}
		ks := &kustomizev1.Kustomization{
			ObjectMeta: metav1.ObjectMeta{Name: "platform", Namespace: ns},
			Spec: kustomizev1.KustomizationSpec{
				Interval: interval, Path: "./deploy", Prune: true, TargetNamespace: ns,
				SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: "platform"},
			},
		}
		g.Expect(c.Client.Create(t.Context(), repo)).To(Succeed())
		g.Expect(c.Client.Create(t.Context(), ks)).To(Succeed())

		g.Eventually(func(g Gomega) {
			g.Expect(c.Client.Get(t.Context(), client.ObjectKeyFromObject(ks), ks)).To(Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(ks.Status.Conditions, "Ready")).To(BeTrue(), "%+v", ks.Status.Conditions)
			g.Expect(ks.Status.LastAppliedRevision).To(Equal("v1.0.0@sha1:" + commit))
		}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())

		var cm corev1.ConfigMap
		g.Expect(c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "platform"}, &cm)).To(Succeed())
		g.Expect(cm.Data).To(HaveKeyWithValue("version", "v1.0.0"))
	})

	t.Run("HelmRepositoryAndHelmReleaseAtExactVersion", func(t *testing.T) {
		g := NewWithT(t)
		charts := testenv.NewChartRepo(t, testenv.ChartDir("hello"))

		repo := &sourcev1.HelmRepository{
			ObjectMeta: metav1.ObjectMeta{Name: "charts", Namespace: ns},
			Spec:       sourcev1.HelmRepositorySpec{URL: charts.URL, Interval: interval},
		}
		hr := &helmv2.HelmRelease{
			ObjectMeta: metav1.ObjectMeta{Name: "greeter", Namespace: ns},
			Spec: helmv2.HelmReleaseSpec{
				Interval: interval,
				Chart: &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{
					Chart: "hello", Version: "1.2.3",
					SourceRef: helmv2.CrossNamespaceObjectReference{Kind: sourcev1.HelmRepositoryKind, Name: "charts"},
				}},
				Values: &apiextensionsv1.JSON{Raw: []byte(`{"greeting":"hi from helm"}`)},
			},
		}
		g.Expect(c.Client.Create(t.Context(), repo)).To(Succeed())
		g.Expect(c.Client.Create(t.Context(), hr)).To(Succeed())

		g.Eventually(func(g Gomega) {
			g.Expect(c.Client.Get(t.Context(), client.ObjectKeyFromObject(hr), hr)).To(Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(hr.Status.Conditions, "Ready")).To(BeTrue(), "%+v", hr.Status.Conditions)
			g.Expect(hr.Status.LastAttemptedRevision).To(Equal("1.2.3"))
		}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())

		var cm corev1.ConfigMap
		g.Expect(c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "greeter-hello"}, &cm)).To(Succeed())
		g.Expect(cm.Data).To(HaveKeyWithValue("greeting", "hi from helm"))
	})
}
