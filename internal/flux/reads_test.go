package flux

import (
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// TestReadsFindsEverySecretFluxReads expands syncs that name a Secret or
// ConfigMap in every field the API offers and checks each one is found,
// with the field that names it.
func TestReadsFindsEverySecretFluxReads(t *testing.T) {
	ref := func(name string) *fleeetv1.LocalObjectReference { return &fleeetv1.LocalObjectReference{Name: name} }
	oci := &fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{
		Source: fleeetv1.Source{
			OCI:       &fleeetv1.OCISource{URL: "oci://registry.example/app", Tag: "1.0.0", Verify: &fleeetv1.OCIVerification{SecretRef: *ref("cosign-keys")}},
			SecretRef: ref("pull"), CertSecretRef: ref("ca"),
		},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{
			Path:           "./",
			Decryption:     &fleeetv1.KustomizeDecryption{SecretRef: *ref("sops")},
			SubstituteFrom: []fleeetv1.SubstituteReference{{Kind: "ConfigMap", Name: "vars"}, {Kind: "Secret", Name: "secret-vars"}},
		}},
	}}
	helm := &fleeetv1.NamedSync{Name: "chart", SyncSpec: fleeetv1.SyncSpec{
		Source: fleeetv1.Source{
			Helm:      &fleeetv1.HelmSource{URL: "https://charts.example", Chart: "app", Version: "1.0.0"},
			SecretRef: ref("basic-auth"), CertSecretRef: ref("tls"),
		},
		Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{
			ValuesFrom: []fleeetv1.ValuesReference{{Kind: "Secret", Name: "values"}},
		}},
	}}
	git := &fleeetv1.NamedSync{Name: "repo", SyncSpec: fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example/repo", Tag: "v1"}, SecretRef: ref("git-auth")},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./"}},
	}}
	cases := []struct {
		sync *fleeetv1.NamedSync
		want []Read
	}{
		{oci, []Read{
			{"OCIRepository spec.certSecretRef", "Secret", "ca"},
			{"OCIRepository spec.secretRef", "Secret", "pull"},
			{"OCIRepository spec.verify.secretRef", "Secret", "cosign-keys"},
			{"Kustomization spec.decryption.secretRef", "Secret", "sops"},
			{"Kustomization spec.postBuild.substituteFrom[0]", "ConfigMap", "vars"},
			{"Kustomization spec.postBuild.substituteFrom[1]", "Secret", "secret-vars"},
		}},
		{helm, []Read{
			{"HelmRepository spec.certSecretRef", "Secret", "tls"},
			{"HelmRepository spec.secretRef", "Secret", "basic-auth"},
			{"HelmRelease spec.valuesFrom[0]", "Secret", "values"},
		}},
		{git, []Read{{"GitRepository spec.secretRef", "Secret", "git-auth"}}},
	}
	for _, c := range cases {
		t.Run(c.sync.Name, func(t *testing.T) {
			g := NewWithT(t)
			x, err := Expand(Target{Owner: "plan", Namespace: "team-a", ServiceAccountName: "tenant"}, c.sync, nil, nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(Reads(x)).To(Equal(c.want))
		})
	}
}

// TestReadsCoversFieldsItDoesNotName shows that a Secret named in a field
// the walk was not written for (a proxy, here set by hand) is found too.
func TestReadsCoversFieldsItDoesNotName(t *testing.T) {
	g := NewWithT(t)
	repo := &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: "repo"},
		Spec: sourcev1.GitRepositorySpec{URL: "https://git.example/repo", ProxySecretRef: &meta.LocalObjectReference{Name: "proxy"}}}
	g.Expect(Reads(&Expansion{Source: repo})).To(Equal([]Read{{"GitRepository spec.proxySecretRef", "Secret", "proxy"}}))
}
