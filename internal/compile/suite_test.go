package compile_test

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// The compile package is pure but for the ConfigMaps control-plane bindings
// read, so its suite starts no apiserver: the tests compile the fixtures
// below, and configMaps stands in for the manager's cache.

// ns is the tenant namespace every fixture lives in.
const ns = "team-a"

// edge is a Remote of the tenant carrying labels.
func edge(name string, labels map[string]string) *fleeetv1.Remote {
	return &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}}
}

// gitSync is a kustomize sync of the app repository at tag.
func gitSync(tag string) fleeetv1.SyncSpec {
	return fleeetv1.SyncSpec{
		Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: tag}},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy"}},
	}
}

// module is a Module of the tenant syncing gitSync(tag).
func module(name, tag string, labels map[string]string) *fleeetv1.Module {
	return &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Generation: 1},
		Spec:       fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Sync: gitSync(tag)}},
	}
}

// named is the sync a Remote holds for the Module name at tag.
func named(name, tag string) *fleeetv1.NamedSync {
	return &fleeetv1.NamedSync{Name: name, SyncSpec: gitSync(tag)}
}

// configMaps is a reader holding the tenant's ConfigMaps, name → data.
func configMaps(data map[string]map[string]string) client.Reader {
	b := fake.NewClientBuilder()
	for name, d := range data {
		b = b.WithObjects(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: d})
	}
	return b.Build()
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
