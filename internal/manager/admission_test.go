package manager_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// warnings collects the admission warnings a client receives.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

// impersonate returns a client acting as user, with every right on fleeet
// objects in the given namespaces, so what stops it is the admission policy.
func impersonate(t *testing.T, user string, namespaces ...string) (client.Client, *warnings) {
	return impersonateIn(t, cluster, user, namespaces...)
}

// impersonateIn is impersonate on the apiserver c.
func impersonateIn(t *testing.T, c *testenv.Cluster, user string, namespaces ...string) (client.Client, *warnings) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleeet-everything"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"fleeet.dev"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}
	if err := c.Client.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		g.Expect(c.Client.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "fleeet-everything-"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		})).To(Succeed())
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	w := &warnings{}
	cfg.WarningHandler = w
	impersonated, err := client.New(cfg, client.Options{Scheme: c.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	return impersonated, w
}

// strictTenant is a tenant namespace with the default allowance: deploy
// only into the namespace of the same name, sources over https/ssh/oci.
func strictTenant(t *testing.T) string {
	return cluster.Namespace(t, "strict", map[string]string{fleeetv1.TenantLabel: "true"})
}

func moduleIn(ns, name string, change func(*fleeetv1.Module)) *fleeetv1.Module {
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
	m.Namespace, m.Name = ns, name
	m.Spec.Sync.Package.Kustomize.TargetNamespace = ns
	if change != nil {
		change(m)
	}
	return m
}

// denied asserts the webhook refused err's request and named the cause.
func denied(g Gomega, err error, want ...string) {
	g.Expect(err).To(HaveOccurred())
	g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	for _, w := range want {
		g.Expect(err.Error()).To(ContainSubstring(w))
	}
}

func TestAdmissionPoliciesRefuseHostileRequests(t *testing.T) {
	ctx := t.Context()
	ns, plain := strictTenant(t), cluster.Namespace(t, "plain", nil)
	alice, _ := impersonate(t, "alice", ns, plain)
	edgeUser := "system:serviceaccount:" + ns + ":fleeet-remote-edge"
	edge, _ := impersonate(t, edgeUser, ns)

	// Objects the manager (the tests' admin identity) owns.
	g := NewWithT(t)
	for _, name := range []string{"edge", "edge-1"} {
		g.Expect(cluster.Client.Create(ctx, pullRemote(ns, name, map[string]string{"env": "prod"}))).To(Succeed())
	}
	g.Expect(cluster.Client.Create(ctx, moduleIn(ns, "app", func(m *fleeetv1.Module) {
		m.Labels[fleeetv1.PolicyLabel] = "kept"
	}))).To(Succeed())
	plan := func(name string) *fleeetv1.ProxyAssemblage {
		pa := &fleeetv1.ProxyAssemblage{}
		NewWithT(t).Eventually(func() error {
			return cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pa)
		}, timeout, poll).Should(Succeed())
		return pa
	}
	values := issueToken(t, ns, "edge", fleeetv1.RegistrationTokenSpec{RemoteLabels: map[string]string{"env": "prod"}})
	registrant := as(t, values.Token)

	cases := []struct {
		name string
		do   func() error
		want []string
	}{
		{"a Module outside a tenant namespace", func() error { return alice.Create(ctx, moduleIn(plain, "x", nil)) },
			[]string{"metadata.namespace: " + plain + " is not a tenant namespace"}},
		{"a RegistrationToken outside a tenant namespace", func() error {
			return alice.Create(ctx, &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: plain, Name: "t"}})
		}, []string{"is not a tenant namespace"}},
		{"a Kustomization into kube-system", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) { m.Spec.Sync.Package.Kustomize.TargetNamespace = "kube-system" }))
		}, []string{`spec.sync.package.kustomize.targetNamespace: namespace "kube-system" is outside what tenant ` + ns}},
		{"a HelmRelease into another tenant's namespace", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source = fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "web", Version: "1.0.0"}}
				m.Spec.Sync.Package = fleeetv1.Package{Helm: &fleeetv1.HelmPackage{TargetNamespace: "team-b"}}
			}))
		}, []string{`spec.sync.package.helm.targetNamespace: namespace "team-b"`}},
		{"a BootstrapModule into another namespace", func() error {
			return alice.Create(ctx, &fleeetv1.BootstrapModule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"},
				Spec: fleeetv1.BootstrapModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Sync: fleeetv1.SyncSpec{
					Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/a.git", Tag: "v1.0.0"}},
					Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./", TargetNamespace: "flux-system"}}}}}})
		}, []string{`namespace "flux-system" is outside`}},
		{"a git tag that is a moving name", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "latest" }))
		}, []string{`spec.sync.source.git.tag: "latest" names a branch or a pattern`}},
		{"a git branch as tag", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "refs/heads/main" }))
		}, []string{"spec.sync.source.git.tag"}},
		{"a Helm version range", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source = fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "web", Version: "^1.2"}}
				m.Spec.Sync.Package = fleeetv1.Package{Helm: &fleeetv1.HelmPackage{TargetNamespace: ns}}
			}))
		}, []string{"spec.sync.source.helm.version"}},
		{"a short git revision", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source.Git.Tag, m.Spec.Sync.Source.Git.Revision = "", "abc123"
			}))
		}, []string{"spec.sync.source.git.revision"}},
		{"a plain-http source", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.URL = "http://git.example.com/a.git" }))
		}, []string{`spec.sync.source.git.url: scheme "http" is not allowed`, "fleeet.dev/allow-insecure-http"}},
		{"a file source", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.URL = "file:///etc/secrets" }))
		}, []string{`spec.sync.source.git.url`, "file:///etc/secrets"}},
		{"a BootstrapModule over plain http", func() error {
			return alice.Create(ctx, &fleeetv1.BootstrapModule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"},
				Spec: fleeetv1.BootstrapModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Sync: fleeetv1.SyncSpec{
					Source:  fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "http://charts.example.com", Chart: "a", Version: "1.0.0"}},
					Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{TargetNamespace: ns}}}}}})
		}, []string{`spec.sync.source.helm.url: scheme "http"`}},
		{"a version policy that does not parse", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) { m.Spec.VersionPolicy = &fleeetv1.VersionPolicy{Semver: "~~1"} }))
		}, []string{`spec.versionPolicy.semver: "~~1" is not a semantic version constraint`}},
		{"a version policy over ssh that does not parse either: every problem is said", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) {
				m.Spec.VersionPolicy = &fleeetv1.VersionPolicy{Semver: "~~1"}
				m.Spec.Sync.Source.Git.URL = "ssh://git@git.example.com/a.git"
				m.Spec.Sync.Source.SecretRef = &fleeetv1.LocalObjectReference{Name: "git-ssh"} // the schema wants one for ssh
			}))
		}, []string{`spec.versionPolicy.semver: "~~1" is not a semantic version constraint`,
			"spec.sync.source.git.url: the manager reads a repository's tags over https:// or http:// only (spec.versionPolicy is set)",
			"spec.sync.source.secretRef: the manager reads public sources only"}},
		{"a digest-follow of a git source", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) { m.Spec.VersionPolicy = &fleeetv1.VersionPolicy{DigestOf: "stable"} }))
		}, []string{"spec.versionPolicy.digestOf: follows an OCI artifact's tag; the sync's source is not spec.sync.source.oci (spec.versionPolicy is set)"}},
		{"a readyExpr that no agent can evaluate", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) {
				m.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Name: "db", ReadyExpr: `dep.status.ready`}, {Name: "cni", ReadyExpr: `self.status.ready`}}
			}))
		}, []string{"spec.sync.dependsOn[1].readyExpr: ERROR: <input>:1:1: undeclared reference to 'self'"}},
		{"every violation at once", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source.Git.URL = "http://git.example.com/a.git"
				m.Spec.Sync.Package.Kustomize.TargetNamespace = "kube-system"
				m.Labels[fleeetv1.TenantLabel] = "other"
			}))
		}, []string{"scheme \"http\"", "kube-system", "metadata.labels[fleeet.dev/tenant]"}},
		{"a reserved label on a Module", func() error {
			return alice.Create(ctx, moduleIn(ns, "x", func(m *fleeetv1.Module) { m.Labels[fleeetv1.TenantLabel] = "other" }))
		}, []string{"metadata.labels[fleeet.dev/tenant]: keys under fleeet.dev/ are set only by the fleet manager"}},
		{"a reserved annotation on a Remote", func() error {
			r := pullRemote(ns, "x", nil)
			r.Annotations = map[string]string{fleeetv1.SpecHashAnnotation: "forged"}
			return alice.Create(ctx, r)
		}, []string{"metadata.annotations[fleeet.dev/spec-hash]"}},
		{"removing a reserved label the manager set", func() error {
			m := &fleeetv1.Module{}
			if err := alice.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, m); err != nil {
				return err
			}
			delete(m.Labels, fleeetv1.PolicyLabel)
			return alice.Update(ctx, m)
		}, []string{"metadata.labels[fleeet.dev/policy]"}},
		{"a tenant creating a ProxyAssemblage", func() error {
			return alice.Create(ctx, &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged"}})
		}, []string{"spec: ProxyAssemblages are compiled by the fleet manager only; alice may not write forged"}},
		{"a tenant rewriting a compiled plan", func() error {
			pa := plan("edge")
			pa.Spec.Assemblage.ServiceAccountName = "cluster-admin"
			return alice.Update(ctx, pa)
		}, []string{"ProxyAssemblages are compiled by the fleet manager only"}},
		{"a tenant writing a plan's status", func() error { return alice.Status().Update(ctx, plan("edge")) },
			[]string{"status: the status of ProxyAssemblage edge is written only by the fleet manager and by cluster identity fleeet-remote-edge"}},
		{"a tenant writing a Remote's status", func() error {
			r := &fleeetv1.Remote{}
			if err := alice.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, r); err != nil {
				return err
			}
			r.Status.AgentVersion = "forged"
			return alice.Status().Update(ctx, r)
		}, []string{"status: the status of Remote edge"}},
		{"a cluster writing the status of a cluster whose name it prefixes", func() error { return edge.Status().Update(ctx, plan("edge-1")) },
			[]string{"status: the status of ProxyAssemblage edge-1 is written only by", edgeUser}},
		{"a cluster writing its own plan's spec", func() error {
			pa := plan("edge")
			pa.Spec.Assemblage.ServiceAccountName = "x"
			return edge.Update(ctx, pa)
		}, []string{"ProxyAssemblages are compiled by the fleet manager only"}},
		{"a registrant choosing a label its token sets", func() error {
			return registrant.Create(ctx, pullRemote(ns, "r1", map[string]string{"env": "dev"}))
		}, []string{`metadata.labels[env]: RegistrationToken edge sets it to "prod"`}},
		{"a registrant setting a reserved label", func() error {
			return registrant.Create(ctx, pullRemote(ns, "r1", map[string]string{fleeetv1.RemoteLabel: "x"}))
		}, []string{"metadata.labels[fleeet.dev/remote]"}},
		{"a registrant asking for push mode", func() error {
			r := pullRemote(ns, "r1", nil)
			r.Spec.KubeconfigRef = &fleeetv1.SecretKeyReference{Name: "stolen", Key: "value"}
			return registrant.Create(ctx, r)
		}, []string{"spec.kubeconfigRef: a registration creates a pull Remote"}},
		{"an identity of a deleted RegistrationToken registering", func() error {
			ghost, _ := impersonate(t, "system:serviceaccount:"+ns+":fleeet-registration-ghost", ns)
			return ghost.Create(ctx, pullRemote(ns, "r1", nil))
		}, []string{"the RegistrationToken behind system:serviceaccount:" + ns + ":fleeet-registration-ghost no longer exists"}},
		{"a registration identity updating a Remote", func() error {
			ghost, _ := impersonate(t, "system:serviceaccount:"+ns+":fleeet-registration-edge", ns)
			r := &fleeetv1.Remote{}
			if err := ghost.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, r); err != nil {
				return err
			}
			r.Labels["env"] = "dev"
			return ghost.Update(ctx, r)
		}, []string{"a registration identity may only create Remotes"}},
		{"a Module depending on itself", func() error {
			return alice.Create(ctx, moduleIn(ns, "loop", func(m *fleeetv1.Module) {
				m.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Name: "loop"}}
			}))
		}, []string{"spec.sync.dependsOn: creates the dependency cycle loop → loop"}},
		{"a dependency cycle through a selector", func() error {
			return alice.Create(ctx, moduleIn(ns, "crds", func(m *fleeetv1.Module) {
				m.Labels = map[string]string{"tier": "platform"}
				m.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "app"}}}}
			}))
		}, []string{"creates the dependency cycle crds → app → crds"}},
		{"a Module required by everything that depends on one of them", func() error {
			return alice.Create(ctx, moduleIn(ns, "cni", func(m *fleeetv1.Module) {
				m.Spec.Sync.RequiredBy = &metav1.LabelSelector{}
				m.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Name: "app"}}
			}))
		}, []string{"spec.sync.dependsOn: creates the dependency cycle cni → app → cni"}},
		{"a plan over the size limit", func() error {
			pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "huge"}}
			sync := moduleIn(ns, "x", nil).Spec.Sync
			sync.Package.Kustomize.Substitute = map[string]string{"padding": strings.Repeat("x", 2000)}
			for i := range 400 {
				pa.Spec.Assemblage.Syncs = append(pa.Spec.Assemblage.Syncs, fleeetv1.NamedSync{Name: fmt.Sprintf("sync-%04d", i), SyncSpec: sync})
			}
			return cluster.Client.Create(ctx, pa)
		}, []string{"spec: the plan of Remote huge is", "over the 524288-byte limit (--max-plan-bytes)"}},
	}
	// app depends on crds by name, so a crds selecting app closes a cycle.
	app := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	g.Expect(testenv.Change(ctx, cluster.Client, app, func(m *fleeetv1.Module) { m.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Name: "crds"}} })).To(Succeed())

	for _, c := range cases {
		t.Run("refuses "+c.name, func(t *testing.T) { denied(NewWithT(t), c.do(), c.want...) })
	}
	t.Run("allows a well-formed Module from a tenant", func(t *testing.T) {
		NewWithT(t).Expect(alice.Create(ctx, moduleIn(ns, "fine", nil))).To(Succeed())
	})
	t.Run("allows a Module whose version a policy picks", func(t *testing.T) {
		NewWithT(t).Expect(alice.Create(ctx, moduleIn(ns, "following", func(m *fleeetv1.Module) {
			m.Spec.VersionPolicy = &fleeetv1.VersionPolicy{Semver: ">=1.0.0 <2"}
		}))).To(Succeed())
	})
	t.Run("allows a cluster to report its own status", func(t *testing.T) {
		NewWithT(t).Eventually(func() error { return edge.Status().Update(ctx, plan("edge")) }, timeout, poll).Should(Succeed())
	})
}

// policyConfigMap writes user Rego into the manager's namespace.
func policyConfigMap(t *testing.T, name, rego string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: name,
		Labels: map[string]string{fleeetv1.PolicyLabel: "true"}}, Data: map[string]string{"policy.rego": rego}}
	NewWithT(t).Expect(cluster.Client.Create(t.Context(), cm)).To(Succeed())
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), cm) })
}

func TestUserPoliciesApplyWithoutRestartAndFailClosed(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := strictTenant(t)
	alice, warned := impersonate(t, "alice", ns)
	suffix := strings.TrimPrefix(ns, "strict-")

	// A policy added at runtime takes effect without a restart.
	policyConfigMap(t, "owner-"+suffix, fmt.Sprintf(`package fleeet.owner_%s
deny contains "metadata.labels.owner: Modules in %s name an owner" if {
	input.request.namespace == %q
	input.request.kind.kind == "Module"
	not input.object.metadata.labels.owner
}
warn contains "metadata.labels.team: consider a team label" if {
	input.request.namespace == %q
	not input.object.metadata.labels.team
}`, suffix, ns, ns, ns))
	g.Eventually(func(g Gomega) {
		denied(g, alice.Create(ctx, moduleIn(ns, "unowned", nil)), "metadata.labels.owner: Modules in "+ns+" name an owner")
	}, timeout, poll).Should(Succeed())
	g.Expect(alice.Create(ctx, moduleIn(ns, "owned", func(m *fleeetv1.Module) { m.Labels["owner"] = "alice" }))).To(Succeed())
	g.Expect(warned.msgs).To(ContainElement("metadata.labels.team: consider a team label"))

	// A policy that does not compile is reported on its ConfigMap; the
	// policies in force stay.
	broken := "broken-" + suffix
	policyConfigMap(t, broken, "package fleeet.broken\ndeny contains msg if {")
	g.Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(cluster.Client.List(ctx, events, client.InNamespace(managerNamespace))).To(Succeed())
		var found bool
		for _, e := range events.Items {
			if e.Regarding.Name == broken && e.Reason == fleeetv1.ReasonPolicyRejected {
				found = found || strings.Contains(e.Note, broken+"/policy.rego")
			}
		}
		g.Expect(found).To(BeTrue(), "a PolicyRejected event naming the file")
	}, timeout, poll).Should(Succeed())
	denied(g, alice.Create(ctx, moduleIn(ns, "still-unowned", nil)), "name an owner")
	g.Expect(cluster.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: broken}})).To(Succeed())

	// A policy that fails while evaluating denies: the webhook fails closed.
	policyConfigMap(t, "faulty-"+suffix, fmt.Sprintf(`package fleeet.faulty_%s
deny contains "unreachable" if {
	input.request.namespace == %q
	to_number(input.object.metadata.name) > 0
}`, suffix, ns))
	g.Eventually(func(g Gomega) {
		denied(g, alice.Create(ctx, moduleIn(ns, "crash", func(m *fleeetv1.Module) { m.Labels["owner"] = "alice" })),
			"denied because the admission policies could not be evaluated")
	}, timeout, poll).Should(Succeed())
}

func TestAPolicyLeavesWithItsLabel(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := strictTenant(t)
	alice, _ := impersonate(t, "alice", ns)
	name := "unlabelled-" + strings.TrimPrefix(ns, "strict-")
	policyConfigMap(t, name, fmt.Sprintf(`package fleeet.unlabelled_%s
deny contains "metadata.name: no Modules in %s" if {
	input.request.namespace == %q
	input.request.kind.kind == "Module"
}`, strings.TrimPrefix(ns, "strict-"), ns, ns))
	g.Eventually(func(g Gomega) {
		denied(g, alice.Create(ctx, moduleIn(ns, "refused", nil)), "metadata.name: no Modules in "+ns)
	}, timeout, poll).Should(Succeed())

	g.Expect(cluster.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: name}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+fleeetv1.PolicyLabel+`":null}}}`)))).To(Succeed())
	g.Eventually(func() error { return alice.Create(ctx, moduleIn(ns, "admitted", nil)) }, timeout, poll).Should(Succeed())
}
