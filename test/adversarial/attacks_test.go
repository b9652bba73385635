package adversarial_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// attack is one hostile request and the check that it was refused, or
// came to nothing; try returns what the attacker observed.
type attack struct {
	name, identity, request string
	try                     func(t *testing.T, g Gomega) string
}

// refused asserts the apiserver refused the request (RBAC or admission)
// and that the refusal names each of want.
func refused(g Gomega, err error, want ...string) string {
	g.Expect(err).To(HaveOccurred(), "the request was allowed")
	g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "refused for another reason: %v", err)
	for _, w := range want {
		g.Expect(err.Error()).To(ContainSubstring(w))
	}
	return err.Error()
}

// refusedByRBAC asserts the apiserver's authorizer refused the request,
// before any webhook saw it.
func refusedByRBAC(g Gomega, err error) string {
	g.Expect(err).To(HaveOccurred(), "the request was allowed")
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "refused for another reason: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("cannot"), "RBAC, not admission, refuses it")
	return err.Error()
}

func TestAttacksOnTheFleetAreRefused(t *testing.T) {
	f := startFleet(t)
	ctx := t.Context()
	admin := f.mgmt.Client
	book := &ledger{}
	t.Cleanup(func() { t.Log("\n" + book.table()) })

	// The identities an attacker holds.
	tenantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{"fleeet.dev"}, Resources: []string{"*"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"*"}},
	}
	plain := "plain"
	falseTenant := "not-a-tenant"
	for ns, labels := range map[string]map[string]string{plain: nil, falseTenant: {fleeetv1.TenantLabel: "false"}} {
		g := NewWithT(t)
		g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}})).To(Succeed())
	}
	alice := user(t, f.mgmt, "alice", tenantRules, tenantA, plain, falseTenant)
	const aliceID = "tenant user alice (fleeet.dev/*, Secrets and ConfigMaps in team-a)"
	spare := f.token(t, tenantA, "spare", fleeetv1.RegistrationTokenSpec{MaxRegistrations: 2, RemoteLabels: map[string]string{"env": "lab"}})
	registrant := bearer(t, f.mgmt, spare["token"].(string))
	const registrantID = "registrant: bearer token of RegistrationToken team-a/spare (env=lab, 2 registrations)"
	cluster := bearer(t, f.mgmt, mint(t, f.mgmt, tenantA, fleeetv1.RemoteIdentityName("edge")))
	const clusterID = "cluster edge of team-a: a token of ServiceAccount fleeet-remote-edge"
	author := user(t, f.mgmt, "pat", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}, managerNamespace)
	const authorID = "policy author pat (ConfigMaps in fleeet-system)"
	manager := bearer(t, f.mgmt, mint(t, f.mgmt, managerNamespace, "fleet-manager"))
	const managerID = "a stolen token of the manager's ServiceAccount fleeet-system/fleet-manager (the chart's ClusterRole)"

	// A second cluster of team-a, registered through the spare token, for
	// attacks of one cluster on another.
	g := NewWithT(t)
	g.Expect(registrant.Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "other",
		Labels: map[string]string{"env": "lab", fleeetv1.RegistrationTokenLabel: "spare"}}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: fleeetv1.RemoteIdentityName("other")}, &corev1.ServiceAccount{})).To(Succeed())
	}, timeout, poll).Should(Succeed(), f.logs)

	attacker := newAttackerServer(t)
	// runGroup runs a group's attacks one after the other, or with atOnce
	// all at the same time: attacks that wait on Flux downstream (about
	// 10 s each) overlap their waits.
	runGroup := func(group string, atOnce bool, attacks []attack) {
		t.Run(group, func(t *testing.T) {
			for _, a := range attacks {
				t.Run(a.name, func(t *testing.T) {
					if atOnce {
						t.Parallel()
					}
					outcome := "(the test stopped before the attack finished)"
					defer func() {
						book.add(record{name: group + "/" + a.name, identity: a.identity, request: a.request, outcome: oneLine(outcome), failed: t.Failed()})
					}()
					g := NewWithT(t)
					g.SetDefaultEventuallyTimeout(time.Minute)
					g.SetDefaultEventuallyPollingInterval(poll)
					outcome = a.try(t, g)
					t.Logf("identity: %s\nrequest:  %s\noutcome:  %s", a.identity, a.request, outcome)
				})
			}
		})
	}
	run := func(group string, attacks []attack) { runGroup(group, false, attacks) }

	run("tenant", tenantAttacks(ctx, f, alice, cluster, aliceID, plain, falseTenant))
	run("push", pushAttacks(ctx, f, alice, aliceID, attacker))
	run("registrant", registrantAttacks(ctx, f, registrant, registrantID))
	run("cluster", clusterAttacks(ctx, f, cluster, clusterID))
	run("webhook", webhookAttacks(ctx, f))
	run("policy-author", authorAttacks(ctx, f, author, authorID, alice, plain))
	runGroup("downstream", true, downstreamAttacks(t, f))
	run("admission", admissionAttacks(ctx, f, alice, aliceID))
	run("serving", servingAttacks(ctx, f))
	run("rollout", rolloutAttacks(ctx, f, alice, aliceID))
	run("dashboard", dashboardAttacks(t, f))
	run("delivery", deliveryAttacks(ctx, f, alice, cluster, aliceID, clusterID))
	run("content", contentAttacks(ctx, f, alice, cluster, manager, aliceID, clusterID, managerID))
	run("shared-plan", sharedPlanAttacks(ctx, f, alice, cluster, manager, aliceID, clusterID))
	run("manager", managerAttacks(ctx, f, manager, managerID))
	run("agent", agentAttacks(t, f))
	run("recovery", recoveryAttacks(ctx, f, f.registerLost(t)))
}

// mint returns a token of the ServiceAccount ns/name, as its holder gets one.
func mint(t *testing.T, c *testenv.Cluster, ns, name string) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Client.SubResource("token").Create(t.Context(), sa, req); err != nil {
		t.Fatal(err)
	}
	return req.Status.Token
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

// module is a valid Module of ns that selects the edge clusters; change
// makes it hostile.
func module(ns, name string, change func(*fleeetv1.Module)) *fleeetv1.Module {
	m := &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "edge"}},
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy", TargetNamespace: ns}},
			},
		}},
	}
	if change != nil {
		change(m)
	}
	return m
}

// deep returns Helm values nested n levels deep.
func deep(n int) *apiextensionsv1.JSON {
	raw := strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n)
	return &apiextensionsv1.JSON{Raw: []byte(raw)}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func tenantAttacks(ctx context.Context, f *fleet, alice, cluster client.Client, id, plain, falseTenant string) []attack {
	admin := f.mgmt.Client
	plan := func(name string) *fleeetv1.ProxyAssemblage {
		return &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name}}
	}
	remote := func(name string) *fleeetv1.Remote {
		return &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name}}
	}
	token := func(name string) *fleeetv1.RegistrationToken {
		return &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name}}
	}
	return []attack{
		{"module-outside-a-tenant-namespace", id, "create Module in namespace plain (no tenant label)", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(plain, "m", nil)), "is not a tenant namespace")
		}},
		{"tenant-label-false-is-not-a-tenant", id, "create Module in a namespace labelled fleeet.dev/tenant=false", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(falseTenant, "m", nil)), "is not a tenant namespace")
		}},
		{"deploy-into-kube-system", id, "Module with kustomize targetNamespace kube-system", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Package.Kustomize.TargetNamespace = "kube-system"
			})), "targetNamespace")
		}},
		{"deploy-into-another-tenant", id, "Module with helm targetNamespace team-b", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source = fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "c", Version: "1.0.0"}}
				m.Spec.Sync.Package = fleeetv1.Package{Helm: &fleeetv1.HelmPackage{ReleaseName: "c", TargetNamespace: tenantB}}
			})), "targetNamespace")
		}},
		{"credentials-in-source-url", id, "Module whose git URL is https://user:token@host/…", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source.Git.URL = "https://deploy:ghp_s3cr3t@git.example.com/app.git"
			})), "spec.sync.source.git.url", "secretRef")
		}},
		{"file-source", id, "Module whose git URL is file:///etc", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source.Git.URL = "file:///etc"
			})), "spec.sync.source.git.url", "file:///etc")
		}},
		{"floating-branch", id, "Module whose git source names no tag or commit", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source.Git.Tag = ""
			})), "branches are not accepted")
		}},
		{"version-range", id, "Module with Helm chart version ^1.0", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source = fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "c", Version: "^1.0"}}
				m.Spec.Sync.Package = fleeetv1.Package{Helm: &fleeetv1.HelmPackage{ReleaseName: "c", TargetNamespace: tenantA}}
			})), "version")
		}},
		{"deeply-nested-values", id, "Module with Helm values nested 9,000 deep (slows every tenant's admissions)", func(t *testing.T, g Gomega) string {
			start := time.Now()
			err := alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source = fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "c", Version: "1.0.0"}}
				m.Spec.Sync.Package = fleeetv1.Package{Helm: &fleeetv1.HelmPackage{ReleaseName: "c", TargetNamespace: tenantA, Values: deep(9000)}}
			}))
			return refused(g, err, "spec.sync.package.helm.values", "nests deeper than") + fmt.Sprintf(" (answered in %s)", time.Since(start).Round(time.Millisecond))
		}},
		{"values-with-too-many-nodes", id, "Module with Helm values holding a list of 100,000 numbers (each node costs every tenant's admissions to judge)", func(t *testing.T, g Gomega) string {
			start := time.Now()
			err := alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source = fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "c", Version: "1.0.0"}}
				m.Spec.Sync.Package = fleeetv1.Package{Helm: &fleeetv1.HelmPackage{ReleaseName: "c", TargetNamespace: tenantA,
					Values: &apiextensionsv1.JSON{Raw: []byte(`{"data":[0` + strings.Repeat(",0", 100_000-1) + `]}`)}}}
			}))
			return refused(g, err, "spec.sync.package.helm.values.data: the object holds more than 20000 JSON nodes", "--max-object-nodes") +
				fmt.Sprintf(" (answered in %s)", time.Since(start).Round(time.Millisecond))
		}},
		{"control-plane-binding-to-a-secret", id, "Module whose controlPlaneBinding reads a Secret in the management cluster", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{{Name: "X", ObjectFieldRef: &fleeetv1.ControlPlaneFieldRef{Kind: "Secret", Name: "fleeet-registration-spare", FieldPath: "/data/token"}}}
			})), "Secrets are never read")
		}},
		{"dependency-cycle", id, "two Modules that depend on each other", func(t *testing.T, g Gomega) string {
			g.Expect(alice.Create(ctx, module(tenantA, "ping", func(m *fleeetv1.Module) {
				m.Labels = map[string]string{"cycle": "ping"}
				m.Spec.Selector = nil
			}))).To(Succeed())
			g.Expect(alice.Patch(ctx, module(tenantA, "ping", func(m *fleeetv1.Module) {
				m.Labels = map[string]string{"cycle": "ping"}
				m.Spec.Selector = nil
				m.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"cycle": "pong"}}}}
			}), client.Merge)).To(Succeed())
			return refused(g, alice.Create(ctx, module(tenantA, "pong", func(m *fleeetv1.Module) {
				m.Labels = map[string]string{"cycle": "pong"}
				m.Spec.Selector = nil
				m.Spec.Sync.DependsOn = []fleeetv1.Dependency{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"cycle": "ping"}}}}
			})), "cycle")
		}},
		{"reserved-label-on-module", id, "Module labelled fleeet.dev/tenant=team-b", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Labels = map[string]string{fleeetv1.TenantLabel: tenantB}
			})), "fleeet.dev/")
		}},
		{"forge-a-registered-remote", id, "Remote labelled fleeet.dev/registration-token=edge, to pose as a registered cluster", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "forged",
				Labels: map[string]string{fleeetv1.RegistrationTokenLabel: "edge"}}}), "fleeet.dev/")
		}},
		{"write-a-plan", id, "create ProxyAssemblage team-a/evil (only the manager writes plans)", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "evil"}}))
		}},
		{"rewrite-a-clusters-plan", id, "update ProxyAssemblage team-a/edge spec", func(t *testing.T, g Gomega) string {
			return refused(g, testenv.Change(ctx, alice, plan("edge"), func(pa *fleeetv1.ProxyAssemblage) {
				pa.Spec.Assemblage.ServiceAccountName = "cluster-admin"
			}))
		}},
		{"forge-a-clusters-report", id, "update ProxyAssemblage team-a/edge status (only the cluster and the manager report)", func(t *testing.T, g Gomega) string {
			return refused(g, testenv.ChangeStatus(ctx, alice, plan("edge"), func(pa *fleeetv1.ProxyAssemblage) {
				pa.Status.Syncs = append(pa.Status.Syncs, fleeetv1.SyncStatus{Name: "forged", State: fleeetv1.SyncReady})
			}))
		}},
		{"forge-a-remotes-health", id, "update Remote team-a/edge status", func(t *testing.T, g Gomega) string {
			return refused(g, testenv.ChangeStatus(ctx, alice, remote("edge"), func(r *fleeetv1.Remote) { r.Status.KubernetesVersion = "forged" }))
		}},
		{"forge-a-remotes-health-amid-its-writes", id, "read Remote team-a/edge, let the cluster write its status, then send the forged status (the read-then-write race that once answered 409 instead of the refusal)", func(t *testing.T, g Gomega) string {
			forged := &fleeetv1.Remote{}
			g.Expect(alice.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "edge"}, forged)).To(Succeed())
			read := forged.DeepCopy()
			g.Expect(testenv.ChangeStatus(ctx, cluster, remote("edge"), func(r *fleeetv1.Remote) {
				r.Status.AgentVersion = "race-" + r.ResourceVersion
			})).To(Succeed(), "the cluster reports between the attacker's read and write")
			forged.Status.KubernetesVersion = "forged"
			return refused(g, alice.Status().Patch(ctx, forged, client.MergeFrom(read)))
		}},
		{"report-a-rollout-done", id, "update Module team-a/ping status to say every cluster is updated", func(t *testing.T, g Gomega) string {
			ping := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "ping"}}
			return refused(g, testenv.ChangeStatus(ctx, alice, ping, func(m *fleeetv1.Module) {
				m.Status.Summary = fleeetv1.ModuleSummary{Total: 9, Updated: 9, Ready: 9}
			}), "written only by the fleet manager")
		}},
		{"reset-a-tokens-registrations", id, "update RegistrationToken team-a/spare status to forget its registrations", func(t *testing.T, g Gomega) string {
			return refused(g, testenv.ChangeStatus(ctx, alice, token("spare"), func(tok *fleeetv1.RegistrationToken) {
				tok.Status.Registered, tok.Status.Registrations = nil, 0
			}))
		}},
		{"extend-a-tokens-expiry", id, "update RegistrationToken team-a/spare status.expiresAt a year ahead", func(t *testing.T, g Gomega) string {
			return refused(g, testenv.ChangeStatus(ctx, alice, token("spare"), func(tok *fleeetv1.RegistrationToken) {
				tok.Status.ExpiresAt = &metav1.Time{Time: time.Now().Add(365 * 24 * time.Hour)}
			}))
		}},
		{"reach-another-tenant", id, "create Module in team-b", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, alice.Create(ctx, module(tenantB, "m", nil)))
		}},
		{"read-another-tenants-token", id, "get Secret team-b/fleeet-registration-edge", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, alice.Get(ctx, client.ObjectKey{Namespace: tenantB, Name: fleeetv1.RegistrationIdentityName("edge")}, &corev1.Secret{}))
		}},
		{"read-the-managers-secrets", id, "list Secrets in fleeet-system", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, alice.List(ctx, &corev1.SecretList{}, client.InNamespace(managerNamespace)))
		}},
		{"steal-a-clusters-identity", id, "request a token for ServiceAccount team-a/fleeet-remote-edge", func(t *testing.T, g Gomega) string {
			req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
			return refusedByRBAC(g, alice.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: fleeetv1.RemoteIdentityName("edge")}}, req))
		}},
		{"nothing-was-created", id, "(after the above) look for any object the refused requests might have left", func(t *testing.T, g Gomega) string {
			modules := &fleeetv1.ModuleList{}
			g.Expect(admin.List(ctx, modules)).To(Succeed())
			names := []string{}
			for _, m := range modules.Items {
				names = append(names, m.Namespace+"/"+m.Name)
			}
			g.Expect(names).To(ConsistOf(tenantA + "/ping"))
			g.Expect(apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "evil"}, &fleeetv1.ProxyAssemblage{}))).To(BeTrue())
			return "only the valid Module ping exists: " + strings.Join(names, ", ")
		}},
	}
}

// attackerServer is a host the tenant controls, standing for any address a
// push kubeconfig can name: it records what the manager sends it and
// answers every request with an error whose body must not reach status.
type attackerServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

const leakedBody = "internal-service-says-SECRET-42"

func newAttackerServer(t *testing.T) *attackerServer {
	a := &attackerServer{}
	a.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Header.Get("Authorization"))
		a.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, leakedBody)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *attackerServer) authorizations() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

func (a *attackerServer) caPEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Certificate().Raw}))
}

// kubeconfig is a kubeconfig for server whose user entry is user (YAML
// lines, indented for the users list) and cluster entry extra lines.
func kubeconfig(server, caPEM, userYAML, clusterExtra string) string {
	ca := ""
	if caPEM != "" {
		ca = "    certificate-authority-data: " + b64(caPEM) + "\n"
	}
	return "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: " + server + "\n" + ca + clusterExtra +
		"contexts:\n- name: c\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user:\n" + userYAML
}

// pushRemoteRefused creates, as alice, a push Remote of team-a with config
// as its kubeconfig Secret, waits until the manager reports it
// Connected=False and check holds of it, and returns that condition.
func pushRemoteRefused(ctx context.Context, g Gomega, f *fleet, alice client.Client, name, config string, check func(Gomega, *fleeetv1.Remote)) *metav1.Condition {
	g.Expect(alice.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name},
		StringData: map[string]string{"value": config}})).To(Succeed())
	remote := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": fleeetv1.GroupVersion.String(), "kind": "Remote",
		"metadata": map[string]any{"namespace": tenantA, "name": name, "labels": map[string]any{"push": name}},
		"spec":     map[string]any{"kubeconfigRef": map[string]any{"name": name, "key": "value"}, "serviceAccountName": tenantSA},
	}}
	g.Expect(alice.Create(ctx, remote)).To(Succeed())
	var cond *metav1.Condition
	g.Eventually(func(g Gomega) {
		r := &fleeetv1.Remote{}
		g.Expect(f.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: name}, r)).To(Succeed())
		cond = apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.ConnectedCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		check(g, r)
	}).Should(Succeed(), f.logs)
	return cond
}

func pushAttacks(ctx context.Context, f *fleet, alice client.Client, id string, attacker *attackerServer) []attack {
	admin := f.mgmt.Client
	dir, err := os.MkdirTemp("", "fleeet-manager-disk-")
	if err != nil {
		panic(err)
	}
	// A file on the manager's disk, standing for its own ServiceAccount token.
	stolen := filepath.Join(dir, "token")
	if err := os.WriteFile(stolen, []byte("the-managers-own-token"), 0o600); err != nil {
		panic(err)
	}
	marker := filepath.Join(dir, "exec-ran")
	// pushRemote creates a push Remote of team-a with kubeconfig as its
	// Secret and waits for the manager to report on it, echoing nothing of
	// what the target answered.
	pushRemote := func(g Gomega, name, config string) *metav1.Condition {
		return pushRemoteRefused(ctx, g, f, alice, name, config, func(g Gomega, r *fleeetv1.Remote) {
			raw, _ := json.Marshal(r.Status)
			g.Expect(string(raw)).NotTo(ContainSubstring(leakedBody), "the target's response body is not echoed")
		})
	}
	// A plan for each of these Remotes, so that a push is attempted.
	plan := func(g Gomega, name string) {
		g.Expect(alice.Create(ctx, module(tenantA, "for-"+name, func(m *fleeetv1.Module) {
			m.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"push": name}}
		}))).To(Succeed())
	}
	refusedField := func(g Gomega, name, config, field string) string {
		plan(g, name)
		cond := pushRemote(g, name, config)
		g.Expect(cond.Reason).To(Equal("KubeconfigRefused"))
		g.Expect(cond.Message).To(ContainSubstring(".%s: refused", field))
		g.Consistently(attacker.authorizations, 3*time.Second, poll).ShouldNot(ContainElement(ContainSubstring("the-managers-own-token")))
		return fmt.Sprintf("Connected=False %s: %s", cond.Reason, cond.Message)
	}
	return []attack{
		{"kubeconfig-token-file", id, "push Remote whose kubeconfig has tokenFile: <a file on the manager's disk> and server: an attacker's host", func(t *testing.T, g Gomega) string {
			return refusedField(g, "attack-1", kubeconfig(attacker.URL, attacker.caPEM(), "    tokenFile: "+stolen+"\n", ""), "tokenFile")
		}},
		{"kubeconfig-client-cert-files", id, "push Remote whose kubeconfig has client-certificate and client-key file paths", func(t *testing.T, g Gomega) string {
			return refusedField(g, "attack-2", kubeconfig(attacker.URL, attacker.caPEM(), "    client-certificate: "+stolen+"\n    client-key: "+stolen+"\n", ""), "client-certificate")
		}},
		{"kubeconfig-ca-file", id, "push Remote whose kubeconfig has certificate-authority: <a file on the manager's disk>", func(t *testing.T, g Gomega) string {
			return refusedField(g, "attack-3", kubeconfig(attacker.URL, "", "    token: x\n", "    certificate-authority: "+stolen+"\n"), "certificate-authority")
		}},
		{"kubeconfig-exec-plugin", id, "push Remote whose kubeconfig runs an exec credential plugin (touch a marker file)", func(t *testing.T, g Gomega) string {
			exec := "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /usr/bin/touch\n      args: [" + marker + "]\n      interactiveMode: Never\n"
			out := refusedField(g, "attack-4", kubeconfig(attacker.URL, attacker.caPEM(), exec, ""), "exec")
			_, err := os.Stat(marker)
			g.Expect(os.IsNotExist(err)).To(BeTrue(), "the plugin ran in the manager")
			return out + "; the plugin never ran"
		}},
		{"kubeconfig-auth-provider", id, "push Remote whose kubeconfig names an auth-provider", func(t *testing.T, g Gomega) string {
			ap := "    auth-provider:\n      name: oidc\n      config:\n        idp-issuer-url: " + attacker.URL + "\n        client-id: cid\n        id-token: tok\n"
			return refusedField(g, "attack-5", kubeconfig(attacker.URL, attacker.caPEM(), ap, ""), "auth-provider")
		}},
		{"kubeconfig-proxy", id, "push Remote whose kubeconfig sends the manager's traffic through proxy-url", func(t *testing.T, g Gomega) string {
			return refusedField(g, "attack-6", kubeconfig("https://10.0.0.1", attacker.caPEM(), "    token: x\n", "    proxy-url: "+attacker.URL+"\n"), "proxy-url")
		}},
		{"push-target-response-body", id, "push Remote with an inline token pointing at a service that answers 500 with a secret body", func(t *testing.T, g Gomega) string {
			plan(g, "echo")
			cond := pushRemote(g, "echo", kubeconfig(attacker.URL, attacker.caPEM(), "    token: inline\n", ""))
			return fmt.Sprintf("Connected=False %s: %s (body not echoed)", cond.Reason, cond.Message)
		}},
		{"push-without-service-account", id, "push Remote without spec.serviceAccountName (Flux would apply downstream as itself)", func(t *testing.T, g Gomega) string {
			g.Expect(alice.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "no-sa"},
				StringData: map[string]string{"value": kubeconfig(attacker.URL, attacker.caPEM(), "    token: inline\n", "")}})).To(Succeed())
			err := alice.Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "no-sa"},
				Spec: fleeetv1.RemoteSpec{KubeconfigRef: &fleeetv1.SecretKeyReference{Name: "no-sa", Key: "value"}}})
			if err != nil {
				return refused(g, err, "serviceAccountName")
			}
			var msg string
			g.Eventually(func(g Gomega) {
				r := &fleeetv1.Remote{}
				g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "no-sa"}, r)).To(Succeed())
				c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.ConnectedCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Message).To(ContainSubstring("serviceAccountName"))
				msg = c.Reason + ": " + c.Message
			}).Should(Succeed(), f.logs)
			return msg
		}},
		{"bootstrap-module-token-file", id, "BootstrapModule onto a push Remote whose kubeconfig reads a file on the manager's disk", func(t *testing.T, g Gomega) string {
			bm := &fleeetv1.BootstrapModule{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "boot"},
				Spec: fleeetv1.BootstrapModuleSpec{SyncPlacement: module(tenantA, "boot", func(m *fleeetv1.Module) {
					m.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"push": "attack-1"}}
				}).Spec.SyncPlacement}}
			g.Expect(alice.Create(ctx, bm)).To(Succeed())
			var msg string
			g.Eventually(func(g Gomega) {
				g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(bm), bm)).To(Succeed())
				c := apimeta.FindStatusCondition(bm.Status.Conditions, fleeetv1.ReadyCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Reason).To(Equal("KubeconfigRefused"))
				g.Expect(c.Message).To(ContainSubstring("user.tokenFile: refused"))
				msg = c.Reason + ": " + c.Message
			}).Should(Succeed(), f.logs)
			ks := &unstructured.UnstructuredList{}
			ks.SetAPIVersion("kustomize.toolkit.fluxcd.io/v1")
			ks.SetKind("KustomizationList")
			g.Expect(admin.List(ctx, ks, client.InNamespace(tenantA))).To(Succeed())
			g.Expect(ks.Items).To(BeEmpty(), "no Flux object hands the kubeconfig to Flux")
			return msg
		}},
	}
}

func registrantAttacks(ctx context.Context, f *fleet, registrant client.Client, id string) []attack {
	admin := f.mgmt.Client
	// remote is a Remote as a registering agent creates it: naming its
	// token, with labels.
	remote := func(name string, labels map[string]string) *fleeetv1.Remote {
		labels = maps.Clone(labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[fleeetv1.RegistrationTokenLabel] = "spare"
		return &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name, Labels: labels}}
	}
	return []attack{
		{"read-secrets", id, "list Secrets in team-a", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, registrant.List(ctx, &corev1.SecretList{}, client.InNamespace(tenantA)))
		}},
		{"mint-a-token", id, "create RegistrationToken team-a/more", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, registrant.Create(ctx, &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "more"}}))
		}},
		{"relabel-a-registered-cluster", id, "update Remote team-a/edge labels", func(t *testing.T, g Gomega) string {
			r := &fleeetv1.Remote{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "edge"}, r)).To(Succeed())
			r.Labels["env"] = "prod"
			return refusedByRBAC(g, registrant.Update(ctx, r))
		}},
		{"delete-a-registered-cluster", id, "delete Remote team-a/edge", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, registrant.Delete(ctx, remote("edge", nil)))
		}},
		{"register-in-another-tenant", id, "create Remote in team-b", func(t *testing.T, g Gomega) string {
			r := remote("elsewhere", nil)
			r.Namespace = tenantB
			return refusedByRBAC(g, registrant.Create(ctx, r))
		}},
		{"read-a-first-credential", id, "get the first-credential Secret of cluster edge", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, registrant.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: fleeetv1.RemoteIdentityName("edge")}, &corev1.Secret{}))
		}},
		{"create-a-module", id, "create Module team-a/m", func(t *testing.T, g Gomega) string {
			return refused(g, registrant.Create(ctx, module(tenantA, "m", nil)))
		}},
		{"spoof-labels", id, "create Remote labelled env=edge (the token sets env=lab) to fall under edge Modules", func(t *testing.T, g Gomega) string {
			return refused(g, registrant.Create(ctx, remote("spoof", map[string]string{"env": "edge"})), "metadata.labels[env]")
		}},
		{"add-labels-the-token-does-not-free", id, "create Remote with an extra label tier=prod the token does not list as free", func(t *testing.T, g Gomega) string {
			return refused(g, registrant.Create(ctx, remote("extra", map[string]string{"env": "lab", "tier": "prod"})), "metadata.labels[tier]")
		}},
		{"reserved-label", id, "create Remote labelled fleeet.dev/tenant=true", func(t *testing.T, g Gomega) string {
			return refused(g, registrant.Create(ctx, remote("reserved", map[string]string{fleeetv1.TenantLabel: "true"})), "fleeet.dev/")
		}},
		{"push-remote", id, "create a push Remote (kubeconfigRef) through registration", func(t *testing.T, g Gomega) string {
			r := remote("pushy", nil)
			r.Spec.KubeconfigRef = &fleeetv1.SecretKeyReference{Name: "x", Key: "value"}
			return refused(g, registrant.Create(ctx, r), "kubeconfig")
		}},
		{"adopt-an-existing-lease", id, "register a Remote named after a Lease someone else owns, to take it over", func(t *testing.T, g Gomega) string {
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "trap"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else")}}
			g.Expect(admin.Create(ctx, lease)).To(Succeed())
			g.Expect(registrant.Create(ctx, remote("trap", map[string]string{"env": "lab"}))).To(Succeed())
			var msg string
			g.Eventually(func(g Gomega) {
				r := &fleeetv1.Remote{}
				g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "trap"}, r)).To(Succeed())
				c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.RegisteredCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Message).To(ContainSubstring("Lease"))
				msg = c.Reason + ": " + c.Message
			}).Should(Succeed(), f.logs)
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(lease), lease)).To(Succeed())
			g.Expect(lease.OwnerReferences).To(BeEmpty(), "the Lease was not adopted")
			g.Expect(*lease.Spec.HolderIdentity).To(Equal("someone-else"))
			return msg
		}},
		{"register-as-a-plan-part", id, "create Remote edge.p1, whose plan would be a further part of edge's", func(t *testing.T, g Gomega) string {
			return refused(g, registrant.Create(ctx, remote("edge.p1", map[string]string{"env": "lab"})), "metadata.name", "not ending in .p1 to .p7")
		}},
		{"used-up-token", id, "create a Remote after the token's registrations are used up", func(t *testing.T, g Gomega) string {
			return refused(g, registrant.Create(ctx, remote("third", map[string]string{"env": "lab"})), "used up")
		}},
	}
}

func clusterAttacks(ctx context.Context, f *fleet, cluster client.Client, id string) []attack {
	admin := f.mgmt.Client
	tokenFor := func(name string, seconds int64) error {
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(seconds)}}
		return cluster.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name}}, req)
	}
	return []attack{
		{"read-another-clusters-plan", id, "get ProxyAssemblage team-a/other", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "other"}, &fleeetv1.ProxyAssemblage{}))
		}},
		{"read-another-tenants-plan", id, "get ProxyAssemblage team-b/edge (same cluster name, other tenant)", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.Get(ctx, client.ObjectKey{Namespace: tenantB, Name: "edge"}, &fleeetv1.ProxyAssemblage{}))
		}},
		{"read-a-part-of-another-clusters-plan", id, "get ProxyAssemblage team-a/other.p1 (a further part of a split plan)", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: fleeetv1.PlanPartName("other", 1)}, &fleeetv1.ProxyAssemblage{}))
		}},
		{"add-a-part-to-its-own-plan", id, "create ProxyAssemblage team-a/edge.p7 (only the manager writes plans)", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.Create(ctx, &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: fleeetv1.PlanPartName("edge", 7)}}))
		}},
		{"list-every-plan", id, "list ProxyAssemblages in team-a", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.List(ctx, &fleeetv1.ProxyAssemblageList{}, client.InNamespace(tenantA)))
		}},
		{"rewrite-its-own-plan", id, "update its own ProxyAssemblage's spec", func(t *testing.T, g Gomega) string {
			pa := &fleeetv1.ProxyAssemblage{}
			g.Expect(cluster.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "edge"}, pa)).To(Succeed())
			pa.Spec.Assemblage.Syncs = nil
			return refusedByRBAC(g, cluster.Update(ctx, pa))
		}},
		{"report-for-another-cluster", id, "update ProxyAssemblage team-a/other status", func(t *testing.T, g Gomega) string {
			pa := &fleeetv1.ProxyAssemblage{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "other"}, pa)).To(Succeed())
			return refusedByRBAC(g, cluster.Status().Update(ctx, pa))
		}},
		{"relabel-itself", id, "update its own Remote's labels to fall under other Modules", func(t *testing.T, g Gomega) string {
			r := &fleeetv1.Remote{}
			g.Expect(cluster.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "edge"}, r)).To(Succeed())
			r.Labels["env"] = "prod"
			return refusedByRBAC(g, cluster.Update(ctx, r))
		}},
		{"relabel-itself-by-request", id, "request env=prod and fleeet.dev/tenant on its own Remote (status.requestedLabels), which its token does not free", func(t *testing.T, g Gomega) string {
			r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "edge"}}
			var before map[string]string
			g.Expect(testenv.ChangeStatus(ctx, cluster, r, func(r *fleeetv1.Remote) {
				before = maps.Clone(r.Labels)
				r.Status.RequestedLabels = map[string]string{"env": "prod", fleeetv1.TenantLabel: "true"}
			})).To(Succeed(), "a cluster may request; the manager judges")
			var msg string
			g.Eventually(func(g Gomega) {
				g.Expect(cluster.Get(ctx, client.ObjectKeyFromObject(r), r)).To(Succeed())
				c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.LabelsAppliedCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Message).To(ContainSubstring(`labels["env"]: not a key the Remote's registration freed (none)`))
				g.Expect(c.Message).To(ContainSubstring(`labels["fleeet.dev/tenant"]: keys under fleeet.dev/ are set only by the fleet manager`))
				msg = c.Message
			}, timeout, poll).Should(Succeed())
			g.Expect(r.Labels).To(Equal(before), "the Remote keeps its labels")
			return fmt.Sprintf("LabelsApplied=False: %.100s…", msg)
		}},
		{"long-lived-token", id, "request a token of its own identity valid for a year", func(t *testing.T, g Gomega) string {
			return refused(g, tokenFor(fleeetv1.RemoteIdentityName("edge"), 365*24*3600), "expirationSeconds")
		}},
		{"token-for-another-cluster", id, "request a token for fleeet-remote-other", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, tokenFor(fleeetv1.RemoteIdentityName("other"), 600))
		}},
		{"renew-another-clusters-lease", id, "update Lease team-a/other (keep a revoked cluster looking alive)", func(t *testing.T, g Gomega) string {
			lease := &coordinationv1.Lease{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "other"}, lease)).To(Succeed())
			lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			return refusedByRBAC(g, cluster.Update(ctx, lease))
		}},
		{"create-a-remote", id, "create Remote team-a/twin", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "twin"}}))
		}},
		{"read-secrets", id, "list Secrets in team-a", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.List(ctx, &corev1.SecretList{}, client.InNamespace(tenantA)))
		}},
		{"read-tokens", id, "list RegistrationTokens in team-a", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.List(ctx, &fleeetv1.RegistrationTokenList{}, client.InNamespace(tenantA)))
		}},
		{"read-modules", id, "list Modules in team-a", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.List(ctx, &fleeetv1.ModuleList{}, client.InNamespace(tenantA)))
		}},
	}
}

// review posts an AdmissionReview straight to the webhook port, as any
// client on the network can, and returns the HTTP status and the review.
func review(f *fleet, body []byte) (int, *admissionv1.AdmissionReview, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.webhookCA)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Post(f.webhookURL, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out := &admissionv1.AdmissionReview{}
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, out)
	return resp.StatusCode, out, nil
}

// forged is an AdmissionReview claiming that user creates obj.
func forged(g Gomega, username, uid string, obj runtime.Object, kind string) []byte {
	raw, err := json.Marshal(obj)
	g.Expect(err).NotTo(HaveOccurred())
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "forged-1",
			Kind:      metav1.GroupVersionKind{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Kind: kind},
			Resource:  metav1.GroupVersionResource{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Resource: strings.ToLower(kind) + "s"},
			Namespace: tenantA, Name: obj.(client.Object).GetName(), Operation: admissionv1.Create,
			UserInfo: authenticationv1.UserInfo{Username: username, UID: uid, Groups: []string{"system:serviceaccounts", "system:authenticated"}},
			Object:   runtime.RawExtension{Raw: raw},
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	return body
}

func webhookAttacks(ctx context.Context, f *fleet) []attack {
	admin := f.mgmt.Client
	const id = "raw HTTPS client on the network, no Kubernetes credentials"
	return []attack{
		{"forged-registration", id, "POST an AdmissionReview claiming the registration identity of token team-a/burn creates Remote ghost", func(t *testing.T, g Gomega) string {
			f.token(t, tenantA, "burn", fleeetv1.RegistrationTokenSpec{RemoteLabels: map[string]string{"env": "lab"}})
			sa := &corev1.ServiceAccount{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: fleeetv1.RegistrationIdentityName("burn")}, sa)).To(Succeed())
			ghost := &fleeetv1.Remote{TypeMeta: metav1.TypeMeta{APIVersion: fleeetv1.GroupVersion.String(), Kind: "Remote"},
				ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "ghost", UID: "00000000-0000-0000-0000-000000000001",
					Labels: map[string]string{"env": "lab", fleeetv1.RegistrationTokenLabel: "burn"}}}
			code, rev, err := review(f, forged(g, "system:serviceaccount:"+tenantA+":"+sa.Name, string(sa.UID), ghost, "Remote"))
			g.Expect(err).NotTo(HaveOccurred())
			answer := fmt.Sprintf("HTTP %d", code)
			if rev.Response != nil {
				answer += fmt.Sprintf(", allowed=%t", rev.Response.Allowed)
			}
			tok := &fleeetv1.RegistrationToken{}
			g.Consistently(func(g Gomega) {
				g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "burn"}, tok)).To(Succeed())
				g.Expect(tok.Status.Registered).To(BeEmpty(), "the forged review used up the token")
			}, 3*time.Second, poll).Should(Succeed())
			return answer + "; the token's registrations stay 0 of 1"
		}},
		{"forged-review-changes-nothing", id, "POST an AdmissionReview claiming the manager creates ProxyAssemblage team-a/forged", func(t *testing.T, g Gomega) string {
			pa := &fleeetv1.ProxyAssemblage{TypeMeta: metav1.TypeMeta{APIVersion: fleeetv1.GroupVersion.String(), Kind: "ProxyAssemblage"},
				ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "forged"}}
			code, _, err := review(f, forged(g, "system:serviceaccount:"+managerNamespace+":fleet-manager", "x", pa, "ProxyAssemblage"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(pa), &fleeetv1.ProxyAssemblage{}))).To(BeTrue())
			return fmt.Sprintf("HTTP %d; an answer only, nothing stored", code)
		}},
		{"malformed-review", id, "POST a truncated JSON body", func(t *testing.T, g Gomega) string {
			code, rev, err := review(f, []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{`))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rev.Response).NotTo(BeNil())
			g.Expect(rev.Response.Allowed).To(BeFalse())
			g.Expect(f.manager.Exited()).To(BeFalse())
			return fmt.Sprintf("HTTP %d, allowed=false: %s; the manager keeps running", code, rev.Response.Result.Message)
		}},
		{"deeply-nested-review", id, "POST a review whose object nests 9,000 deep", func(t *testing.T, g Gomega) string {
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": fleeetv1.GroupVersion.String(), "kind": "Module",
				"metadata": map[string]any{"name": "deep", "namespace": tenantA}}}
			body := forged(g, "alice", "", obj, "Module")
			body = bytes.Replace(body, []byte(`"metadata":`), []byte(`"spec":`+string(deep(9000).Raw)+`,"metadata":`), 1)
			start := time.Now()
			code, rev, err := review(f, body)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rev.Response).NotTo(BeNil())
			g.Expect(rev.Response.Allowed).To(BeFalse())
			return fmt.Sprintf("HTTP %d, denied in %s: %s", code, time.Since(start).Round(time.Millisecond), rev.Response.Result.Message)
		}},
		{"plain-http", id, "POST a review over plain HTTP to the webhook port", func(t *testing.T, g Gomega) string {
			url := strings.Replace(f.webhookURL, "https://", "http://", 1)
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Post(url, "application/json", strings.NewReader("{}"))
			if err != nil {
				return "refused: " + err.Error()
			}
			defer resp.Body.Close()
			g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "a plain HTTP request is not served")
			return fmt.Sprintf("HTTP %d (TLS required)", resp.StatusCode)
		}},
	}
}

func authorAttacks(ctx context.Context, f *fleet, author client.Client, id string, alice client.Client, plain string) []attack {
	admin := f.mgmt.Client
	// submit stores Rego in a policy ConfigMap and waits for the manager's
	// verdict on it, an Event with reason want.
	// A rejected ConfigMap is deleted afterwards: while it stays, no user
	// policy set containing it compiles, so none after it would load.
	submit := func(g Gomega, name, rego, want string) string {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: name,
			Labels: map[string]string{fleeetv1.PolicyLabel: "true"}}, Data: map[string]string{"policy.rego": rego}}
		g.Expect(author.Create(ctx, cm)).To(Succeed())
		if want == "PolicyRejected" {
			defer func() { g.Expect(author.Delete(ctx, cm)).To(Succeed()) }()
		}
		var msg string
		g.Eventually(func(g Gomega) {
			events := &corev1.EventList{}
			g.Expect(admin.List(ctx, events, client.InNamespace(managerNamespace))).To(Succeed())
			found := false
			for _, e := range events.Items {
				if e.InvolvedObject.Name == name && e.Reason == want {
					found, msg = true, e.Reason+": "+e.Message
				}
			}
			g.Expect(found).To(BeTrue())
		}).Should(Succeed(), f.logs)
		return msg
	}
	boundaryHolds := func(g Gomega) {
		refused(g, alice.Create(ctx, module(plain, "after-policy", nil)), "is not a tenant namespace")
	}
	return []attack{
		{"become-the-manager", id, "user Rego in package fleeet.lib defining `manager if true`", func(t *testing.T, g Gomega) string {
			msg := submit(g, "everyone-is-manager", "package fleeet.lib\n\nmanager if true\n", "PolicyRejected")
			boundaryHolds(g)
			return msg + "; the tenant boundary still holds"
		}},
		{"switch-off-the-tenant-rule", id, "user Rego in package fleeet.tenant defining tenant_namespace if true", func(t *testing.T, g Gomega) string {
			msg := submit(g, "no-tenants", "package fleeet.tenant\n\ntenant_namespace if true\n", "PolicyRejected")
			boundaryHolds(g)
			return msg + "; the tenant boundary still holds"
		}},
		{"call-out-to-the-network", id, "user Rego calling http.send", func(t *testing.T, g Gomega) string {
			return submit(g, "exfiltrate", "package fleeet.exfil\n\ndeny contains \"x\" if http.send({\"method\": \"GET\", \"url\": \"https://example.com\"}).status_code == 0\n", "PolicyRejected")
		}},
		{"add-a-denial", id, "user Rego in its own package denying Modules labelled frozen=true (what policy authors may do)", func(t *testing.T, g Gomega) string {
			msg := submit(g, "frozen", "package fleeet.frozen\n\ndeny contains \"metadata.labels.frozen: frozen\" if input.object.metadata.labels.frozen == \"true\"\n", "PolicyLoaded")
			g.Eventually(func(g Gomega) {
				refused(g, alice.Create(ctx, module(tenantA, "frozen", func(m *fleeetv1.Module) { m.Labels = map[string]string{"frozen": "true"} })), "frozen")
			}).Should(Succeed())
			return msg + "; its denial applies, nothing else changes"
		}},
	}
}

func downstreamAttacks(t *testing.T, f *fleet) []attack {
	ctx := t.Context()
	admin, down := f.mgmt.Client, f.down.Client
	// team-c's cluster, reached in push mode: its attacks run beside the
	// others, so it is there before any of them.
	g := NewWithT(t)
	g.Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantC, Name: "downstream"},
		StringData: map[string]string{"value": f.pushKubeconfig}})).To(Succeed())
	g.Expect(admin.Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: tenantC, Name: "pushed", Labels: map[string]string{"env": "edge"}},
		Spec: fleeetv1.RemoteSpec{KubeconfigRef: &fleeetv1.SecretKeyReference{Name: "downstream", Key: "value"}, ServiceAccountName: tenantSA}})).To(Succeed())
	const idA = "tenant team-a's Module, applied downstream by Flux as team-a/fleeet-tenant"
	const idB = "tenant team-b's Module, its bindings resolved downstream"
	const idC = "tenant team-c's Module, pushed by the manager, applied downstream by Flux as team-c/fleeet-tenant"
	// escape commits files to a repository and creates a Module of ns
	// syncing it to the edge cluster, and returns the sync's report.
	escape := func(t *testing.T, g Gomega, ns, name string, files map[string]string, change func(*fleeetv1.Module), want ...string) *fleeetv1.SyncStatus {
		remote := "edge"
		if ns == tenantC {
			remote = "pushed"
		}
		url, _ := f.git.Commit(t, ns+"-"+name, files, "v1.0.0")
		g.Expect(admin.Create(ctx, module(ns, name, func(m *fleeetv1.Module) {
			m.Spec.Sync.Source.Git.URL = url
			if change != nil {
				change(m)
			}
		}))).To(Succeed())
		var st *fleeetv1.SyncStatus
		g.Eventually(func(g Gomega) {
			pa := &fleeetv1.ProxyAssemblage{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: remote}, pa)).To(Succeed())
			st = pa.ReportedSync(name)
			g.Expect(st).NotTo(BeNil())
			g.Expect(st.State).To(Equal(fleeetv1.SyncFailed))
			for _, w := range want {
				g.Expect(st.Message).To(ContainSubstring(w))
			}
		}, 2*timeout).Should(Succeed(), f.logs)
		return st
	}
	return []attack{
		{"cluster-role-binding", idA, "a Module whose manifests bind team-a's ServiceAccount to cluster-admin", func(t *testing.T, g Gomega) string {
			st := escape(t, g, tenantA, "escalate", map[string]string{
				"deploy/kustomization.yaml": "resources: [crb.yaml]\n",
				"deploy/crb.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: team-a-admin\n" +
					"roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n" +
					"subjects: [{kind: ServiceAccount, name: fleeet-tenant, namespace: team-a}]\n",
			}, nil, "forbidden")
			g.Expect(apierrors.IsNotFound(down.Get(ctx, client.ObjectKey{Name: "team-a-admin"}, &rbacv1.ClusterRoleBinding{}))).To(BeTrue())
			return "Failed: " + st.Message
		}},
		{"write-into-another-namespace", idA, "a Module whose manifests create a ConfigMap in kube-system and a Namespace", func(t *testing.T, g Gomega) string {
			// No targetNamespace, so the manifests' own namespaces stand.
			st := escape(t, g, tenantA, "sprawl", map[string]string{
				"deploy/kustomization.yaml": "resources: [ns.yaml, cm.yaml]\n",
				"deploy/ns.yaml":            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a-sprawl\n",
				"deploy/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: planted\n  namespace: kube-system\n",
			}, func(m *fleeetv1.Module) { m.Spec.Sync.Package.Kustomize.TargetNamespace = "" }, "forbidden")
			g.Expect(apierrors.IsNotFound(down.Get(ctx, client.ObjectKey{Name: "team-a-sprawl"}, &corev1.Namespace{}))).To(BeTrue())
			g.Expect(apierrors.IsNotFound(down.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "planted"}, &corev1.ConfigMap{}))).To(BeTrue())
			return "Failed: " + st.Message
		}},
		{"push-mode-cluster-role-binding", idC, "in push mode, a Module whose manifests bind team-c's ServiceAccount to cluster-admin", func(t *testing.T, g Gomega) string {
			st := escape(t, g, tenantC, "escalate", map[string]string{
				"deploy/kustomization.yaml": "resources: [crb.yaml]\n",
				"deploy/crb.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: team-c-admin\n" +
					"roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n" +
					"subjects: [{kind: ServiceAccount, name: fleeet-tenant, namespace: team-c}]\n",
			}, nil, "forbidden", "system:serviceaccount:team-c:fleeet-tenant")
			g.Expect(apierrors.IsNotFound(down.Get(ctx, client.ObjectKey{Name: "team-c-admin"}, &rbacv1.ClusterRoleBinding{}))).To(BeTrue())
			return "Failed: " + st.Message
		}},
		{"no-target-namespace-into-another-tenant", idA, "a Module without targetNamespace whose manifests create a ConfigMap in team-b", func(t *testing.T, g Gomega) string {
			st := escape(t, g, tenantA, "trespass", map[string]string{
				"deploy/kustomization.yaml": "resources: [cm.yaml]\n",
				"deploy/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: trespass\n  namespace: team-b\n",
			}, func(m *fleeetv1.Module) { m.Spec.Sync.Package.Kustomize.TargetNamespace = "" }, "forbidden", "system:serviceaccount:team-a:fleeet-tenant")
			g.Expect(apierrors.IsNotFound(down.Get(ctx, client.ObjectKey{Namespace: tenantB, Name: "trespass"}, &corev1.ConfigMap{}))).To(BeTrue())
			return "Failed: " + st.Message
		}},
		{"no-target-namespace-cluster-scoped", idA, "a Module without targetNamespace whose manifests create a ClusterRole", func(t *testing.T, g Gomega) string {
			st := escape(t, g, tenantA, "widen", map[string]string{
				"deploy/kustomization.yaml": "resources: [cr.yaml]\n",
				"deploy/cr.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: team-a-everything\n" +
					"rules: [{apiGroups: ['*'], resources: ['*'], verbs: ['*']}]\n",
			}, func(m *fleeetv1.Module) { m.Spec.Sync.Package.Kustomize.TargetNamespace = "" }, "forbidden")
			g.Expect(apierrors.IsNotFound(down.Get(ctx, client.ObjectKey{Name: "team-a-everything"}, &rbacv1.ClusterRole{}))).To(BeTrue())
			return "Failed: " + st.Message
		}},
		{"push-mode-no-target-namespace", idC, "in push mode, a Module without targetNamespace whose manifests create ConfigMaps in kube-system and team-a", func(t *testing.T, g Gomega) string {
			st := escape(t, g, tenantC, "sprawl", map[string]string{
				"deploy/kustomization.yaml": "resources: [system.yaml, neighbour.yaml]\n",
				"deploy/system.yaml":        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: planted-by-c\n  namespace: kube-system\n",
				"deploy/neighbour.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: planted-by-c\n  namespace: team-a\n",
			}, func(m *fleeetv1.Module) { m.Spec.Sync.Package.Kustomize.TargetNamespace = "" }, "forbidden", "system:serviceaccount:team-c:fleeet-tenant")
			for _, ns := range []string{"kube-system", tenantA} {
				g.Expect(apierrors.IsNotFound(down.Get(ctx, client.ObjectKey{Namespace: ns, Name: "planted-by-c"}, &corev1.ConfigMap{}))).To(BeTrue(), ns)
			}
			return "Failed: " + st.Message
		}},
		{"bind-a-secret-the-tenant-cannot-read", idB, "a binding to Secret team-b/db downstream, which the agent may read but team-b's ServiceAccount may not", func(t *testing.T, g Gomega) string {
			g.Expect(down.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantB, Name: "db"},
				StringData: map[string]string{"password": "hunter2-downstream"}})).To(Succeed())
			st := escape(t, g, tenantB, "peek", map[string]string{
				"deploy/kustomization.yaml": "resources: [cm.yaml]\n",
				"deploy/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: peek\ndata:\n  pw: ${PW}\n",
			}, func(m *fleeetv1.Module) {
				m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"PW": "$(PW)"}
				m.Spec.Sync.Bindings = []fleeetv1.Binding{{Name: "PW", ObjectFieldRef: &fleeetv1.ObjectFieldRef{APIVersion: "v1", Kind: "Secret", Name: "db", FieldPath: "/data/password"}}}
			}, "binding PW", "forbidden")
			ks := &unstructured.UnstructuredList{}
			ks.SetAPIVersion("kustomize.toolkit.fluxcd.io/v1")
			ks.SetKind("KustomizationList")
			g.Expect(down.List(ctx, ks, client.InNamespace(tenantB))).To(Succeed())
			raw, _ := json.Marshal(ks)
			g.Expect(string(raw)).NotTo(ContainSubstring(b64("hunter2-downstream")))
			return "Failed: " + st.Message
		}},
		{"control-plane-value-becomes-a-lookup", idB, "a control-plane binding whose value is the text $(PW), hoping the agent resolves it downstream", func(t *testing.T, g Gomega) string {
			url, _ := f.git.Commit(t, "echo", map[string]string{
				"deploy/kustomization.yaml": "resources: [cm.yaml]\n",
				"deploy/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: echo\ndata:\n  v: ${V}\n",
			}, "v1.0.0")
			g.Expect(admin.Create(ctx, module(tenantB, "echo", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source.Git.URL = url
				m.Spec.ControlPlaneBindings = []fleeetv1.ControlPlaneBinding{{Name: "CP", Value: ptr.To("$(PW)")}}
				m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{"V": "$(CP)"}
				m.Spec.Sync.Bindings = []fleeetv1.Binding{{Name: "PW", Value: ptr.To("resolved-downstream")}}
			}))).To(Succeed())
			cm := &corev1.ConfigMap{}
			g.Eventually(func(g Gomega) {
				g.Expect(down.Get(ctx, client.ObjectKey{Namespace: tenantB, Name: "echo"}, cm)).To(Succeed())
			}, 2*timeout).Should(Succeed(), f.logs)
			g.Expect(cm.Data).To(HaveKeyWithValue("v", "$(PW)"))
			return "ConfigMap echo holds the literal $(PW)"
		}},
	}
}
