package remote_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// target is an HTTPS server standing in for a tenant-controlled push
// target: it records the Authorization header of every request and answers
// each with the same status code, content type and body. (client-go sends
// credentials only over TLS.)
type target struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newTarget(t *testing.T, code int, contentType, body string) *target {
	tg := &target{}
	tg.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.mu.Lock()
		tg.auth = append(tg.auth, r.Header.Get("Authorization"))
		tg.mu.Unlock()
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(tg.Close)
	return tg
}

// cluster is the kubeconfig cluster entry that reaches the target and
// trusts its certificate.
func (tg *target) cluster() clientcmdapi.Cluster {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tg.Certificate().Raw})
	return clientcmdapi.Cluster{Server: tg.URL, CertificateAuthorityData: ca}
}

// requests returns the Authorization headers of the requests seen so far.
func (tg *target) requests() []string {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]string(nil), tg.auth...)
}

// pushRemote creates, in a fresh namespace, a push Remote named edge whose
// kubeconfig Secret holds data (none when data is nil) and whose Flux
// account is "deployer"; the compiler writes the (empty) plan that makes the
// push controller deliver to it. edit may change the Remote before it is
// created.
func pushRemote(t *testing.T, data []byte, edit func(*fleeetv1.Remote)) *fleeetv1.Remote {
	t.Helper()
	g := NewWithT(t)
	ns := tenant(t)
	if data != nil {
		g.Expect(cluster.Client.Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "edge-kubeconfig", Namespace: ns},
			Data:       map[string][]byte{"value": data},
		})).To(Succeed())
	}
	r := &fleeetv1.Remote{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns},
		Spec: fleeetv1.RemoteSpec{
			KubeconfigRef:      &fleeetv1.SecretKeyReference{Name: "edge-kubeconfig", Key: "value"},
			ServiceAccountName: "deployer",
		},
	}
	if edit != nil {
		edit(r)
	}
	g.Expect(cluster.Client.Create(t.Context(), r)).To(Succeed())
	return r
}

// judged waits until the push controller has judged the Remote's current
// generation and returns the Remote.
func judged(t *testing.T, r *fleeetv1.Remote) *fleeetv1.Remote {
	t.Helper()
	got := &fleeetv1.Remote{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(r), got)).To(Succeed())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(apimeta.FindStatusCondition(got.Status.Conditions, fleeetv1.ConnectedCondition)).
			NotTo(BeNil(), "the push controller has judged the Remote")
	}, timeout, poll).Should(Succeed())
	return got
}

// expectRefused checks the kstatus of a Remote the manager refuses to push
// to: Connected, Ready False and Stalled True, all for reason, with a
// message naming field.
func expectRefused(t *testing.T, r *fleeetv1.Remote, reason, field string) {
	t.Helper()
	g := NewWithT(t)
	if c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.ConnectedCondition); c != nil {
		t.Logf("Connected: %s: %s", c.Reason, c.Message)
	}
	g.Expect(r.Status.Mode).To(Equal(fleeetv1.PushMode))
	for _, typ := range []string{fleeetv1.ConnectedCondition, fleeetv1.ReadyCondition, fleeetv1.StalledCondition} {
		c := apimeta.FindStatusCondition(r.Status.Conditions, typ)
		g.Expect(c).NotTo(BeNil(), typ)
		want := metav1.ConditionFalse
		if typ == fleeetv1.StalledCondition {
			want = metav1.ConditionTrue
		}
		g.Expect(c.Status).To(Equal(want), typ)
		g.Expect(c.Reason).To(Equal(reason), typ)
		g.Expect(c.Message).To(ContainSubstring(field), typ)
	}
	// The refusal is an event too, for kubectl describe and alerting.
	g.Eventually(func(g Gomega) []string {
		return warnings(g, cluster.Client, r.Namespace, "Remote", r.Name, reason)
	}, timeout, poll).Should(ContainElement(ContainSubstring(field)))
}

func TestPushKubeconfigCannotSendTheManagersFilesAsCredentials(t *testing.T) {
	g := NewWithT(t)
	// Stands in for the manager's own ServiceAccount token.
	secret := "manager-token-" + strings.Repeat("x", 16)
	tokenFile := filepath.Join(t.TempDir(), "token")
	g.Expect(os.WriteFile(tokenFile, []byte(secret), 0o600)).To(Succeed())
	tg := newTarget(t, http.StatusInternalServerError, "application/json", "{}")

	r := judged(t, pushRemote(t, testenv.Kubeconfig(t, tg.cluster(), clientcmdapi.AuthInfo{TokenFile: tokenFile}), nil))

	for _, auth := range tg.requests() {
		g.Expect(auth).NotTo(ContainSubstring(secret), "the manager sent the content of a file on its disk as a bearer token")
	}
	g.Expect(tg.requests()).To(BeEmpty(), "a refused kubeconfig is never used")
	expectRefused(t, r, "KubeconfigRefused", "users[0].user.tokenFile")
	g.Expect(r.Status.Conditions[0].Message).NotTo(ContainSubstring(secret))
}

func TestPushKubeconfigCannotRunCommandsInTheManager(t *testing.T) {
	g := NewWithT(t)
	marker := filepath.Join(t.TempDir(), "ran")
	tg := newTarget(t, http.StatusInternalServerError, "application/json", "{}")
	credential := `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-exec"}}`

	r := judged(t, pushRemote(t, testenv.Kubeconfig(t, tg.cluster(), clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion:      "client.authentication.k8s.io/v1",
		Command:         "/bin/sh",
		Args:            []string{"-c", "touch " + marker + "; echo '" + credential + "'"},
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}), nil))

	g.Expect(marker).NotTo(BeAnExistingFile(), "the manager ran the tenant's exec plugin")
	g.Expect(tg.requests()).To(BeEmpty(), "a refused kubeconfig is never used")
	expectRefused(t, r, "KubeconfigRefused", "users[0].user.exec")
}

func TestPushNeverEchoesTheTargetsResponseIntoStatus(t *testing.T) {
	for name, tc := range map[string]struct {
		code        int
		contentType string
		body        string
		want        string
	}{
		"an error in plain text": {http.StatusInternalServerError, "text/plain",
			"internal-service-says: SECRET-a1b2c3", "HTTP 500"},
		"an error as a Kubernetes Status": {http.StatusForbidden, "application/json",
			`{"kind":"Status","apiVersion":"v1","status":"Failure","code":403,"reason":"Forbidden","message":"internal-service-says: SECRET-a1b2c3"}`, "HTTP 403"},
		"a success that is not Kubernetes": {http.StatusOK, "application/json",
			`{"internal-service-says":"SECRET-a1b2c3"}`, ""},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			tg := newTarget(t, tc.code, tc.contentType, tc.body)
			r := judged(t, pushRemote(t, testenv.Kubeconfig(t, tg.cluster(), clientcmdapi.AuthInfo{Token: "tenant-token"}), nil))
			c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.ConnectedCondition)
			t.Logf("Connected: %s: %s", c.Reason, c.Message)

			g.Expect(tg.requests()).NotTo(BeEmpty(), "the manager reached the target")
			g.Expect(tg.requests()[0]).To(Equal("Bearer tenant-token"), "an inline token is used")
			g.Expect(c.Message).NotTo(ContainSubstring("SECRET"), "the target's response body is not in status")
			g.Expect(c.Message).NotTo(ContainSubstring("internal-service-says"), "the target's response body is not in status")
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(fleeetv1.ReasonUnreachable))
			g.Expect(c.Message).To(ContainSubstring(tc.want))
			// Unreachable is retried, not terminal.
			g.Expect(apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.StalledCondition)).To(BeNil())
		})
	}
}

func TestPushRemoteWithoutServiceAccountNameIsRefusedUntilItHasOne(t *testing.T) {
	g := NewWithT(t)
	// The management cluster plays the downstream one: its admin kubeconfig
	// carries inline credentials, and it serves the Assemblage CRD.
	admin, err := os.ReadFile(cluster.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	r := pushRemote(t, admin, func(r *fleeetv1.Remote) { r.Spec.ServiceAccountName = "" })
	g.Eventually(func(g Gomega) {
		pa := &fleeetv1.ProxyAssemblage{ObjectMeta: r.ObjectMeta}
		get(g, pa)
		pa.Spec.Assemblage.ServiceAccountName = "plan-choice"
		g.Expect(cluster.Client.Update(t.Context(), pa)).To(Succeed())
	}, timeout, poll).Should(Succeed())

	expectRefused(t, judged(t, r), fleeetv1.ReasonServiceAccountNameUnset, "spec.serviceAccountName")
	asm := &fleeetv1.Assemblage{}
	key := client.ObjectKey{Namespace: r.Namespace, Name: r.Namespace}
	g.Expect(apierrors.IsNotFound(cluster.Client.Get(t.Context(), key, asm))).To(BeTrue(), "nothing is pushed")

	g.Expect(testenv.Change(t.Context(), cluster.Client, r, func(r *fleeetv1.Remote) { r.Spec.ServiceAccountName = "deployer" })).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(t.Context(), key, asm)).To(Succeed())
		g.Expect(asm.Spec.ServiceAccountName).To(Equal("deployer"), "the Remote's account, not the plan's")
	}, timeout, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := &fleeetv1.Remote{}
		g.Expect(cluster.Client.Get(t.Context(), client.ObjectKeyFromObject(r), got)).To(Succeed())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		c := apimeta.FindStatusCondition(got.Status.Conditions, fleeetv1.ConnectedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonPushed))
		g.Expect(apimeta.IsStatusConditionTrue(got.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue())
		g.Expect(apimeta.FindStatusCondition(got.Status.Conditions, fleeetv1.StalledCondition)).To(BeNil())
	}, timeout, poll).Should(Succeed())
}

// Only a change of the Remote's kubeconfig Secret can fix what these
// kubeconfigs lack, so the push controller stalls on each, naming the field,
// and is brought back by the Secret's change alone.
func TestPushStallsOnAKubeconfigItCannotUseUntilItsSecretChanges(t *testing.T) {
	edge := clientcmdapi.Cluster{Server: "https://edge.invalid:6443"}
	token := clientcmdapi.AuthInfo{Token: "tenant-token"}
	for name, tc := range map[string]struct {
		data   []byte
		key    string
		reason string
		field  string
	}{
		"no Secret": {nil, "value", fleeetv1.ReasonKubeconfigInvalid, "spec.kubeconfigRef: reading Secret edge-kubeconfig: "},
		"no such key in the Secret": {[]byte("{}"), "kubeconfig", fleeetv1.ReasonKubeconfigInvalid,
			`spec.kubeconfigRef: Secret edge-kubeconfig has no key "kubeconfig"`},
		"not a kubeconfig": {[]byte("clusters: {"), "value", fleeetv1.ReasonKubeconfigInvalid,
			`spec.kubeconfigRef: Secret edge-kubeconfig key "value": not a valid kubeconfig`},
		"a proxy": {testenv.Kubeconfig(t, clientcmdapi.Cluster{Server: edge.Server, ProxyURL: "http://proxy.internal:3128"}, token),
			"value", fleeetv1.ReasonKubeconfigRefused, "clusters[0].cluster.proxy-url: refused"},
		"TLS verification off": {testenv.Kubeconfig(t, clientcmdapi.Cluster{Server: edge.Server, InsecureSkipTLSVerify: true}, token),
			"value", fleeetv1.ReasonKubeconfigRefused, "clusters[0].cluster.insecure-skip-tls-verify: refused"},
		"a client key file": {testenv.Kubeconfig(t, edge, clientcmdapi.AuthInfo{ClientKey: "/etc/kubernetes/pki/admin.key"}),
			"value", fleeetv1.ReasonKubeconfigRefused, "users[0].user.client-key: refused"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			r := pushRemote(t, tc.data, func(r *fleeetv1.Remote) { r.Spec.KubeconfigRef.Key = tc.key })
			expectRefused(t, judged(t, r), tc.reason, tc.field)

			// The management cluster plays the downstream one.
			admin, err := os.ReadFile(cluster.Kubeconfig)
			g.Expect(err).NotTo(HaveOccurred())
			fixed := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: "edge-kubeconfig"},
				Data: map[string][]byte{tc.key: admin}}
			if tc.data == nil {
				g.Expect(cluster.Client.Create(t.Context(), fixed)).To(Succeed())
			} else {
				g.Expect(cluster.Client.Update(t.Context(), fixed)).To(Succeed())
			}
			g.Eventually(func(g Gomega) {
				get(g, r)
				g.Expect(connected(g, r).Reason).To(Equal(fleeetv1.ReasonPushed))
				g.Expect(apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.StalledCondition)).To(BeNil())
			}, timeout, poll).Should(Succeed())
		})
	}
}

// The push controller copies the downstream Assemblage's status into the
// plan, stamped with the plan's generation, for the Module controller to read.
func TestPushCopiesBackTheStatusOfThePlanItPushed(t *testing.T) {
	g := NewWithT(t)
	admin, err := os.ReadFile(cluster.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	r := pushRemote(t, admin, nil)
	// The management cluster plays the downstream one: the Assemblage is
	// named after the tenant namespace, in the namespace of that name.
	asm := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Namespace}}
	g.Eventually(func(g Gomega) {
		get(g, asm)
		g.Expect(asm.Spec.ServiceAccountName).To(Equal("deployer"))
	}, timeout, poll).Should(Succeed())

	// What the agent downstream reports once Flux has applied the plan (a
	// patch: the push controller writes the Assemblage too).
	g.Expect(testenv.ChangeStatus(t.Context(), cluster.Client, asm, func(asm *fleeetv1.Assemblage) {
		asm.Status = fleeetv1.AssemblageStatus{ObservedGeneration: asm.Generation, Conditions: []metav1.Condition{{
			Type: fleeetv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "all syncs ready",
			ObservedGeneration: asm.Generation, LastTransitionTime: metav1.Now()}}}
	})).To(Succeed())
	pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name}}
	g.Eventually(func(g Gomega) {
		get(g, pa)
		g.Expect(pa.Status.ObservedGeneration).To(Equal(pa.Generation))
		c := apimeta.FindStatusCondition(pa.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Message).To(Equal("all syncs ready"))
		g.Expect(c.ObservedGeneration).To(Equal(pa.Generation))
	}, timeout, poll).Should(Succeed())
	get(g, r)
	g.Expect(connected(g, r).Reason).To(Equal(fleeetv1.ReasonPushed))
}

// The manager reads a push cluster's Flux through its kubeconfig, as a pull
// cluster's agent does, and follows a change of it.
func TestPushReportsTheClustersFlux(t *testing.T) {
	g := NewWithT(t)
	// The management cluster plays the downstream one, with Flux's CRDs
	// from its Go modules, unlabelled.
	admin, err := os.ReadFile(cluster.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	r := pushRemote(t, admin, nil)
	reports := func(version string) func(g Gomega) {
		return func(g Gomega) {
			got := &fleeetv1.Remote{ObjectMeta: r.ObjectMeta}
			get(g, got)
			g.Expect(got.Status.Flux).To(HaveValue(Equal(fleeetv1.FluxStatus{Version: version})))
			c := apimeta.FindStatusCondition(got.Status.Conditions, fleeetv1.FluxCompatibleCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(fleeetv1.ReasonFluxServed))
			g.Expect(apimeta.IsStatusConditionTrue(got.Status.Conditions, fleeetv1.ConnectedCondition)).To(BeTrue())
		}
	}
	g.Eventually(reports("unknown"), timeout, poll).Should(Succeed())

	relabel := func(labels map[string]string) {
		for _, name := range flux.CRDNames() {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			g.Expect(cluster.Client.Get(context.Background(), client.ObjectKey{Name: name}, crd)).To(Succeed())
			crd.Labels = labels
			g.Expect(cluster.Client.Update(context.Background(), crd)).To(Succeed())
		}
	}
	relabel(map[string]string{flux.VersionLabel: "v2.7.3"})
	t.Cleanup(func() { relabel(nil) })
	g.Eventually(reports("v2.7.3"), timeout, poll).Should(Succeed())
}

// splitPushRemote is a push Remote whose cluster is the management cluster
// itself, selected by twelve Modules too large together for one plan part.
func splitPushRemote(t *testing.T) *fleeetv1.Remote {
	admin, err := os.ReadFile(cluster.Kubeconfig)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	r := pushRemote(t, admin, nil)
	for i := range 12 {
		fleettest.CreateModule(t, cluster.Client, r.Namespace, fmt.Sprintf("app-%02d", i), "v1.0.0", everyRemote, fleettest.Filler(1500))
	}
	return r
}

// A push Remote whose plan the compiler split over parts gets it whole: the
// push controller writes every part downstream, further parts owned by part
// 0, with the union of the Modules' syncs, and copies each part's report
// back to the ProxyAssemblage part of the same number.
func TestPushDeliversASplitPlanWholeAndReportsEachPart(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	r := splitPushRemote(t)
	var plan fleeetv1.ProxyPlan
	g.Eventually(func(g Gomega) {
		plan = wholePlan(g, r)
		g.Expect(plan.Listed().Syncs()).To(HaveLen(12))
	}, timeout, poll).Should(Succeed())
	g.Expect(len(plan)).To(BeNumerically(">=", 2), "the compiler split the plan")

	// The management cluster plays the downstream one.
	var parts []*fleeetv1.Assemblage
	g.Eventually(func(g Gomega) {
		parts = nil
		var syncs []string
		for k, pa := range plan {
			asm := &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: fleeetv1.PlanPartName(r.Namespace, k)}}
			get(g, asm)
			g.Expect(asm.Spec.Parts).To(Equal(pa.Spec.Assemblage.Parts), asm.Name)
			g.Expect(asm.Spec.PartRevision).To(Equal(pa.Spec.Assemblage.PartRevision), asm.Name)
			g.Expect(asm.Spec.ServiceAccountName).To(Equal("deployer"))
			if k > 0 {
				g.Expect(metav1.IsControlledBy(asm, parts[0])).To(BeTrue(), "%s goes with part 0", asm.Name)
			}
			for _, s := range asm.Spec.Syncs {
				syncs = append(syncs, s.Name)
			}
			parts = append(parts, asm)
		}
		g.Expect(syncs).To(HaveLen(12), "the union of the parts, each sync once")
	}, timeout, poll).Should(Succeed())

	// What the agent downstream reports on the last part comes back to the
	// ProxyAssemblage part of the same number.
	k := len(parts) - 1
	last := parts[k]
	last.Status = fleeetv1.AssemblageStatus{ObservedGeneration: last.Generation,
		Syncs:   []fleeetv1.SyncStatus{{Name: last.Spec.Syncs[0].Name, State: fleeetv1.SyncReady}},
		Summary: fleeetv1.SyncSummary{Total: 1, Ready: 1}}
	g.Expect(cluster.Client.Status().Update(ctx, last)).To(Succeed())
	g.Eventually(func(g Gomega) {
		part := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: fleeetv1.PlanPartName(r.Name, k)}}
		get(g, part)
		g.Expect(part.Status.ObservedGeneration).To(Equal(part.Generation))
		g.Expect(part.ReportedSync(last.Spec.Syncs[0].Name)).To(HaveValue(HaveField("State", fleeetv1.SyncReady)))
	}, timeout, poll).Should(Succeed())
	get(g, r)
	g.Expect(connected(g, r).Reason).To(Equal(fleeetv1.ReasonPushed))
}

// downstreamParts is what the push controller left in namespace ns of the
// cluster it pushes to: each Assemblage's UID, generation and spec, by
// name.
func downstreamParts(g Gomega, ns string) map[string]fleeetv1.Assemblage {
	list := &fleeetv1.AssemblageList{}
	g.ExpectWithOffset(1, cluster.Client.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	out := map[string]fleeetv1.Assemblage{}
	for _, asm := range list.Items {
		out[asm.Name] = fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{UID: asm.UID, Generation: asm.Generation}, Spec: asm.Spec}
	}
	return out
}

// expectNotWhole checks that the push Remote r says its plan is not whole,
// for why, and that the cluster keeps held, the Assemblages last pushed,
// for a few polls of the push controller.
func expectNotWhole(t *testing.T, r *fleeetv1.Remote, why string, held map[string]fleeetv1.Assemblage) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		got := &fleeetv1.Remote{ObjectMeta: r.ObjectMeta}
		get(g, got)
		c := apimeta.FindStatusCondition(got.Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonPlanIncomplete))
		g.Expect(c.Message).To(ContainSubstring(why))
		g.Expect(c.Message).To(ContainSubstring("the cluster keeps the last plan pushed"))
		g.Expect(c.ObservedGeneration).To(Equal(got.Generation))
	}, timeout, poll).Should(Succeed())
	g.Consistently(func(g Gomega) map[string]fleeetv1.Assemblage { return downstreamParts(g, r.Namespace) }, 3*time.Second, poll).
		Should(Equal(held), "nothing is written or deleted downstream from a plan not whole")
}

// A push Remote's plan that is not whole is not pushed: while a part is at
// another revision than part 0 lists (the compiler writes further parts
// first) or a listed part is missing, the Remote is not Ready, saying
// which part, and the Assemblages downstream stay as last pushed, none
// rewritten or deleted. The plan whole again is pushed.
func TestPushLeavesTheClusterAsItIsWhileThePlanIsNotWhole(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	r := splitPushRemote(t)
	// The management cluster plays the downstream one.
	pushedWhole := func(g Gomega) fleeetv1.ProxyPlan {
		plan := wholePlan(g, r)
		g.Expect(plan.Listed().Syncs()).To(HaveLen(12))
		held := downstreamParts(g, r.Namespace)
		g.Expect(held).To(HaveLen(len(plan)))
		for k, pa := range plan {
			asm := held[fleeetv1.PlanPartName(r.Namespace, k)]
			g.Expect(asm.Spec.Parts).To(Equal(pa.Spec.Assemblage.Parts))
			g.Expect(asm.Spec.PartRevision).To(Equal(pa.Spec.Assemblage.PartRevision))
		}
		got := &fleeetv1.Remote{ObjectMeta: r.ObjectMeta}
		get(g, got)
		g.Expect(apimeta.FindStatusCondition(got.Status.Conditions, fleeetv1.ReadyCondition)).
			To(HaveValue(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", fleeetv1.ReasonPushed))))
		return plan
	}
	var plan fleeetv1.ProxyPlan
	g.Eventually(func(g Gomega) { plan = pushedWhole(g) }, timeout, poll).Should(Succeed())
	g.Expect(len(plan)).To(BeNumerically(">=", 2), "the compiler split the plan")
	held := downstreamParts(g, r.Namespace)
	listed := plan[0].Spec.Assemblage.Parts[0]

	// Suspended, the Remote's plan is left to the test by the compiler; the
	// push controller has seen that once it has judged the Remote's new
	// generation.
	patch(t, r, `{"spec":{"suspend":true}}`)
	judged(t, r)

	// Part 1 is rewritten before part 0 lists its new revision.
	part1 := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: fleeetv1.PlanPartName(r.Name, 1)}}
	g.Eventually(func(g Gomega) {
		get(g, part1)
		part1.Spec.Assemblage.PartRevision = "next"
		g.Expect(cluster.Client.Update(ctx, part1)).To(Succeed())
	}, timeout, poll).Should(Succeed())
	expectNotWhole(t, r, fmt.Sprintf("part 1 of %d is at revision %q, the plan lists %q", len(plan), "next", listed), held)

	// Part 1 is gone while part 0 still lists it.
	g.Expect(cluster.Client.Delete(ctx, part1)).To(Succeed())
	expectNotWhole(t, r, fmt.Sprintf("part 1 of %d not read yet", len(plan)), held)

	// The compiler writes the plan whole again, and it is pushed.
	patch(t, r, `{"spec":{"suspend":false}}`)
	g.Eventually(func(g Gomega) { pushedWhole(g) }, timeout, poll).Should(Succeed())
	got := judged(t, r)
	g.Expect(connected(g, got).Reason).To(Equal(fleeetv1.ReasonPushed))
	g.Expect(apimeta.FindStatusCondition(got.Status.Conditions, fleeetv1.StalledCondition)).To(BeNil())
}
