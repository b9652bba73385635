package manager_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// frozenPolicy is a user policy: it denies any object labelled frozen=true.
const frozenPolicy = "package fleeet.frozen\n\n" +
	"deny contains msg if {\n  input.object.metadata.labels.frozen == \"true\"\n" +
	"  msg := \"metadata.labels.frozen: frozen objects are refused\"\n}\n"

// With two replicas under leader election, the one that does not lead
// enforces the user policies as the leader does: each loads them itself.
func TestEveryReplicaEnforcesTheUserPolicies(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c := testenv.StartCluster(t, "management", testenv.WithWebhooks())
	const system = "fleeet-system"
	g.Expect(c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: system}})).To(Succeed())
	g.Expect(c.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: "frozen", Labels: map[string]string{fleeetv1.PolicyLabel: "true"}},
		Data:       map[string]string{"policy.rego": frozenPolicy},
	})).To(Succeed())
	bin := testenv.BuildCommand(t, "fleet-manager", "replicas")
	replica := []string{"--namespace=" + system, "--leader-elect", "--leader-election-namespace=" + system}

	// The leader serves its webhook on a port of its own, which the test
	// reaches directly; it takes the Lease before the second replica starts.
	_, leaderPort, err := net.SplitHostPort(testenv.FreeAddr(t))
	g.Expect(err).NotTo(HaveOccurred())
	testenv.StartManagerProcess(t, bin, c, append(replica, "--webhook-port="+leaderPort)...)
	lease := &coordinationv1.Lease{}
	g.Eventually(func(g Gomega) *string {
		g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: system, Name: "fleet-manager.fleeet.dev"}, lease)).To(Succeed())
		return lease.Spec.HolderIdentity
	}, time.Minute, poll).ShouldNot(BeNil())
	leader := *lease.Spec.HolderIdentity

	// The second replica serves where the apiserver sends admission.
	testenv.StartManagerProcess(t, bin, c, replica...)
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: system, Name: "fleet-manager.fleeet.dev"}, lease)).To(Succeed())
	g.Expect(*lease.Spec.HolderIdentity).To(Equal(leader), "the first replica still leads")

	ns := tenantIn(t, c)
	frozen := fleettest.NewModule("v1.0.0", nil)
	frozen.Namespace, frozen.Labels["frozen"] = ns, "true"
	err = c.Client.Create(ctx, frozen)
	g.Expect(err).To(MatchError(ContainSubstring("metadata.labels.frozen: frozen objects are refused")), "the non-leader denies per the user policy")
	thawed := fleettest.NewModule("v1.0.0", nil)
	thawed.Namespace = ns
	g.Expect(c.Client.Create(ctx, thawed)).To(Succeed(), "and only per the policy")

	// The leader, asked directly, judges the same.
	raw, err := json.Marshal(frozen)
	g.Expect(err).NotTo(HaveOccurred())
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("leader-probe"),
			Kind:      metav1.GroupVersionKind{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Kind: "Module"},
			Resource:  metav1.GroupVersionResource{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Resource: "modules"},
			Name:      frozen.Name,
			Namespace: ns,
			Operation: admissionv1.Create,
			UserInfo:  authenticationv1.UserInfo{Username: "admin", Groups: []string{"system:masters", "system:authenticated"}},
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(review)
	g.Expect(err).NotTo(HaveOccurred())
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test checks the answer, not the certificate
	url := fmt.Sprintf("https://%s/validate", net.JoinHostPort(c.Webhooks.LocalServingHost, leaderPort))
	resp, err := insecure.Post(url, "application/json", bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	answer := admissionv1.AdmissionReview{}
	g.Expect(json.NewDecoder(resp.Body).Decode(&answer)).To(Succeed())
	g.Expect(answer.Response).NotTo(BeNil())
	g.Expect(answer.Response.Allowed).To(BeFalse(), "the leader denies per the user policy")
	g.Expect(answer.Response.Result.Message).To(ContainSubstring("metadata.labels.frozen: frozen objects are refused"))
}
