// Package fleettest creates a tenant's Remotes and Modules in a test cluster
// and reads back the plans and status the manager makes of them, for the
// tests of the manager's controllers and of the whole fleet-manager alike.
package fleettest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// NewRemote creates a pull Remote with labels in ns, and when online a
// Lease renewed now, as its agent's first heartbeat.
func NewRemote(t testing.TB, c client.Client, ns, name string, labels map[string]string, online bool) {
	t.Helper()
	g := gomega.NewWithT(t)
	g.Expect(c.Create(t.Context(), &fleeetv1.Remote{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
	})).To(gomega.Succeed())
	if online {
		Heartbeat(t, c, ns, name)
	}
}

// Heartbeat creates the Lease of Remote name in ns renewed now, as its
// agent's first heartbeat.
func Heartbeat(t testing.TB, c client.Client, ns, name string) {
	t.Helper()
	now := metav1.NewMicroTime(time.Now())
	gomega.NewWithT(t).Expect(c.Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), RenewTime: &now},
	})).To(gomega.Succeed())
}

// NewModule returns the Module app, labelled tier=app, placing a kustomize
// sync of the app repository at tag on the Remotes selector selects; the
// caller sets its namespace and creates it.
func NewModule(tag string, selector *metav1.LabelSelector) *fleeetv1.Module {
	return &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: map[string]string{"tier": "app"}},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: selector,
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: tag}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy"}},
			},
		}},
	}
}

// CreateModule creates in c the Module ns/name syncing the name repository
// at tag into the Remotes selector selects; edit may change it first.
func CreateModule(t testing.TB, c client.Client, ns, name, tag string, selector *metav1.LabelSelector, edit func(*fleeetv1.Module)) *fleeetv1.Module {
	t.Helper()
	m := &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: selector,
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/" + name + ".git", Tag: tag}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy"}},
			},
		}},
	}
	if edit != nil {
		edit(m)
	}
	gomega.NewWithT(t).Expect(c.Create(t.Context(), m)).To(gomega.Succeed())
	return m
}

// Filler makes a Module's sync about size bytes, for CreateModule's edit:
// a few such Modules take a plan past a small --max-plan-bytes.
func Filler(size int) func(*fleeetv1.Module) {
	return func(m *fleeetv1.Module) {
		m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"filler": strings.Repeat("x", size)}
	}
}

// HeldTag returns the tag of the app sync a Remote's ProxyAssemblage holds
// whole, or "".
func HeldTag(pa *fleeetv1.ProxyAssemblage) string {
	return appTag(pa.Spec.Assemblage.Syncs)
}

// appTag returns the tag of the app sync of syncs, or "".
func appTag(syncs []fleeetv1.NamedSync) string {
	for _, s := range syncs {
		if s.Name == "app" {
			return s.Source.Git.Tag
		}
	}
	return ""
}

// Proxy reads the Remote name's ProxyAssemblage, its plan.
func Proxy(g gomega.Gomega, c client.Client, ns, name string) *fleeetv1.ProxyAssemblage {
	pa := &fleeetv1.ProxyAssemblage{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pa)).To(gomega.Succeed())
	return pa
}

// ModuleStatus reads the Module app of ns.
func ModuleStatus(g gomega.Gomega, c client.Client, ns string) *fleeetv1.Module {
	m := &fleeetv1.Module{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "app"}, m)).To(gomega.Succeed())
	return m
}
