package manager_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// frozenPolicy is a user policy: it denies any object labelled frozen=true.
const frozenPolicy = "package fleeet.frozen\n\n" +
	"deny contains msg if {\n  input.object.metadata.labels.frozen == \"true\"\n" +
	"  msg := \"metadata.labels.frozen: frozen objects are refused\"\n}\n"

// Three fleet-manager processes under leader election, as the chart runs
// them: each judges admission by the user policies it loaded itself, and
// when the leader is killed mid-rollout another takes over the rollout
// where it stood, holding its bound, moving no plan back and admitting no
// Remote twice. The test runs on replicaCluster: the package's shared
// cluster has an in-process manager reconciling everything, which would
// carry the rollout on and serve the webhook itself.
func TestReplicasEnforceUserPoliciesAndHandOverARollout(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c, bin, system := startReplicas(t)
	g.Expect(c.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: "frozen", Labels: map[string]string{fleeetv1.PolicyLabel: "true"}},
		Data:       map[string]string{"policy.rego": frozenPolicy},
	})).To(Succeed())
	// Short leases so the handover takes seconds, not the 15 s default;
	// Remotes stay online however long the test takes.
	replica := []string{"--namespace=" + system, "--leader-elect", "--leader-election-namespace=" + system,
		"--leader-election-lease-duration=8s", "--leader-election-renew-deadline=6s", "--leader-election-retry-period=1s",
		"--offline-grace=10m"}

	// The first replica takes the Lease before the others start, so the
	// test knows which process leads. The first two serve their webhooks
	// on ports of their own, which the test reaches directly; the third
	// serves where the apiserver sends admission.
	ports := make([]string, 3)
	for i := range 2 {
		_, port, err := net.SplitHostPort(testenv.FreeAddr(t))
		g.Expect(err).NotTo(HaveOccurred())
		ports[i] = port
	}
	ports[2] = strconv.Itoa(c.Webhooks.LocalServingPort)
	leaderProcess := testenv.StartManagerProcess(t, bin, c, append(replica, "--webhook-port="+ports[0])...)
	leader := leaseHolder(g, c, system, "")
	for _, port := range ports[1:] {
		testenv.StartManagerProcess(t, bin, c, append(replica, "--webhook-port="+port)...)
	}
	g.Expect(leaseHolder(g, c, system, "")).To(Equal(leader), "the first replica still leads")

	ns := tenantIn(t, c)
	frozen := fleettest.NewModule("v1", nil)
	frozen.Namespace, frozen.Labels["frozen"] = ns, "true"
	g.Expect(c.Client.Create(ctx, frozen)).To(MatchError(ContainSubstring("metadata.labels.frozen: frozen objects are refused")),
		"the replica the apiserver asks denies per the user policy")
	for i, port := range ports {
		answer := askWebhook(g, c, port, frozen)
		g.Expect(answer.Allowed).To(BeFalse(), "replica %d denies per the user policy", i)
		g.Expect(answer.Result.Message).To(ContainSubstring("metadata.labels.frozen: frozen objects are refused"), "replica %d", i)
	}

	// A rolling update, one Remote at a time, over five Remotes whose
	// agents the test plays. It is admitted, and only the user policy
	// refused the frozen one.
	online := []string{"r1", "r2", "r3", "r4", "r5"}
	agents := map[string]client.Client{}
	for _, name := range online {
		fleettest.NewRemote(t, c.Client, ns, name, nil, true)
		agents[name], _ = impersonateIn(t, c, "system:serviceaccount:"+ns+":"+fleeetv1.RemoteIdentityName(name), ns)
	}
	agent := func(remote string) client.Client { return agents[remote] }
	m := fleettest.NewModule("v1", &metav1.LabelSelector{})
	m.Namespace = ns
	m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	g.Expect(c.Client.Create(ctx, m)).To(Succeed())
	ready := func(string, string) fleeetv1.SyncState { return fleeetv1.SyncReady }
	fleettest.DriveHeld(g, agent, ns, online, fleettest.HeldTag, ready, func(g Gomega) {
		g.Expect(fleettest.ModuleStatus(g, c.Client, ns).Status.Summary.Ready).To(Equal(int32(5)))
	})
	rw := fleettest.WatchRollout(t, c.Config, ns, online, 1, "v1", "v2")
	g.Eventually(func() error {
		m := fleettest.ModuleStatus(g, c.Client, ns)
		m.Spec.Sync.Source.Git.Tag = "v2"
		return c.Client.Update(ctx, m)
	}, timeout, poll).Should(Succeed())

	// The first two Remotes to get v2 become Ready on it; the third stays
	// Progressing, which holds the rollout there: the leader dies with one
	// Remote moving and two to go, whatever the timing.
	var mu sync.Mutex
	var released []string
	holdThird := func(remote, tag string) fleeetv1.SyncState {
		mu.Lock()
		defer mu.Unlock()
		if tag != "v2" || slices.Contains(released, remote) {
			return fleeetv1.SyncReady
		}
		if len(released) < 2 {
			released = append(released, remote)
			return fleeetv1.SyncReady
		}
		return fleeetv1.SyncProgressing
	}
	var before []string // the Remotes holding v2 when the leader dies
	fleettest.DriveHeld(g, agent, ns, online, fleettest.HeldTag, holdThird, func(g Gomega) {
		before = nil
		for _, name := range online {
			if fleettest.HeldTag(fleettest.Proxy(g, c.Client, ns, name)) == "v2" {
				before = append(before, name)
			}
		}
		g.Expect(before).To(HaveLen(3))
		ro := fleettest.ModuleStatus(g, c.Client, ns).Status.Rollout
		g.Expect(ro).NotTo(BeNil())
		g.Expect(ro.Admitted).To(BeEmpty(), "the third holds v2: no admission is in flight")
		g.Expect(ro.Moving).To(Equal(int32(1)))
	})
	leaderProcess.Kill()
	successor := leaseHolder(g, c, system, leader)

	// The new leader carries the rollout to the end, one Remote at a time.
	fleettest.DriveHeld(g, agent, ns, online, fleettest.HeldTag, ready, func(g Gomega) {
		m := fleettest.ModuleStatus(g, c.Client, ns)
		for _, name := range online {
			g.Expect(fleettest.HeldTag(fleettest.Proxy(g, c.Client, ns, name))).To(Equal("v2"), "Remote %s", name)
		}
		g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))
		g.Expect(apimeta.IsStatusConditionTrue(m.Status.Conditions, fleeetv1.ReadyCondition)).To(BeTrue())
		g.Expect(m.Status.Summary.Ready).To(Equal(int32(5)))
		g.Expect(m.Status.History).NotTo(BeEmpty())
		g.Expect(m.Status.History[0].Version).To(Equal("v2"))
	})
	rw.Check(g)
	g.Expect(rw.Peak()).To(Equal(1), "the watch saw the rollout move one Remote at a time, across the handover")
	g.Expect(leaseHolder(g, c, system, "")).To(Equal(successor), "one handover only")

	m = fleettest.ModuleStatus(g, c.Client, ns)
	var versions []string
	for _, h := range m.Status.History {
		versions = append(versions, h.Version)
	}
	g.Expect(versions).To(Equal([]string{"v2", "v1"}), "each version recorded once")

	// Each Remote was admitted to v2 once: the old leader's admissions
	// before it died (at most once, an event in flight may die with it),
	// the new leader's after, none by both.
	events := &eventsv1.EventList{}
	g.Expect(c.Client.List(ctx, events, client.InNamespace(ns))).To(Succeed())
	admitted := map[string]int{}
	for _, e := range events.Items {
		if e.Reason != fleeetv1.ReasonRemoteAdmitted || !strings.HasSuffix(e.Note, " moves to v2") {
			continue
		}
		n := 1
		if e.Series != nil {
			n = int(e.Series.Count)
		}
		admitted[strings.Fields(e.Note)[1]] += n
	}
	for _, name := range online {
		if slices.Contains(before, name) {
			g.Expect(admitted[name]).To(BeNumerically("<=", 1), "Remote %s admitted to v2 more than once", name)
		} else {
			g.Expect(admitted[name]).To(Equal(1), "Remote %s admitted to v2 by the new leader once", name)
		}
	}
}

// leaseHolder waits until the fleet-manager's leader Lease in namespace
// is held by someone other than not, and returns the holder.
func leaseHolder(g Gomega, c *testenv.Cluster, namespace, not string) string {
	lease := &coordinationv1.Lease{}
	g.Eventually(func(g Gomega) string {
		g.Expect(c.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "fleet-manager.fleeet.dev"}, lease)).To(Succeed())
		g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
		return *lease.Spec.HolderIdentity
	}, timeout, poll).ShouldNot(BeElementOf("", not))
	return *lease.Spec.HolderIdentity
}

// askWebhook posts an AdmissionReview creating obj, as a cluster admin, to
// the webhook a replica serves on port, and returns its answer.
func askWebhook(g Gomega, c *testenv.Cluster, port string, obj *fleeetv1.Module) *admissionv1.AdmissionResponse {
	raw, err := json.Marshal(obj)
	g.Expect(err).NotTo(HaveOccurred())
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("probe-" + port),
			Kind:      metav1.GroupVersionKind{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Kind: "Module"},
			Resource:  metav1.GroupVersionResource{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Resource: "modules"},
			Name:      obj.Name,
			Namespace: obj.Namespace,
			Operation: admissionv1.Create,
			UserInfo:  authenticationv1.UserInfo{Username: "admin", Groups: []string{"system:masters", "system:authenticated"}},
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(review)
	g.Expect(err).NotTo(HaveOccurred())
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test checks the answer, not the certificate
	url := fmt.Sprintf("https://%s/validate", net.JoinHostPort(c.Webhooks.LocalServingHost, port))
	resp, err := insecure.Post(url, "application/json", bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	answer := admissionv1.AdmissionReview{}
	g.Expect(json.NewDecoder(resp.Body).Decode(&answer)).To(Succeed())
	g.Expect(answer.Response).NotTo(BeNil())
	return answer.Response
}
