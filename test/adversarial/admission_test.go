package adversarial_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// admissionAttacks are tenants' and network clients' attempts on what the
// admission webhook judges: deeply nested reviews, rollout windows that can
// never open, malformed rollout annotations, and push Remotes aimed at
// cloud metadata addresses.
func admissionAttacks(ctx context.Context, f *fleet, alice client.Client, id string) []attack {
	admin := f.mgmt.Client
	window := func(schedule, zone string, d time.Duration) func(*fleeetv1.Module) {
		return func(m *fleeetv1.Module) {
			m.Spec.Rollout.Windows = []fleeetv1.RolloutWindow{{Schedule: schedule, TimeZone: zone, Duration: metav1.Duration{Duration: d}}}
		}
	}
	staged := func(annotations map[string]string) *fleeetv1.Module {
		return module(tenantA, "staged", func(m *fleeetv1.Module) {
			m.Annotations = annotations
			m.Spec.Rollout.Stages = []fleeetv1.RolloutStage{{Name: "canary", Selector: metav1.LabelSelector{}}}
		})
	}
	const approveForm = "is not of the form <revision>/<stage>"
	// pushTo creates a push Remote of team-a whose kubeconfig names server,
	// with a plan so that the manager connects, and returns its Connected
	// condition once False.
	pushTo := func(g Gomega, name, server string) *metav1.Condition {
		g.Expect(alice.Create(ctx, module(tenantA, "for-"+name, func(m *fleeetv1.Module) {
			m.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"push": name}}
		}))).To(Succeed())
		g.Expect(alice.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name},
			StringData: map[string]string{"value": kubeconfig(server, "", "    token: inline\n", "")}})).To(Succeed())
		remote := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": fleeetv1.GroupVersion.String(), "kind": "Remote",
			"metadata": map[string]any{"namespace": tenantA, "name": name, "labels": map[string]any{"push": name}},
			"spec":     map[string]any{"kubeconfigRef": map[string]any{"name": name, "key": "value"}, "serviceAccountName": tenantSA},
		}}
		g.Expect(alice.Create(ctx, remote)).To(Succeed())
		var cond *metav1.Condition
		g.Eventually(func(g Gomega) {
			r := &fleeetv1.Remote{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: name}, r)).To(Succeed())
			cond = apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.ConnectedCondition)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Message).To(ContainSubstring("a network the manager does not connect to"))
		}).Should(Succeed(), f.logs)
		return cond
	}
	return []attack{
		{"deep-review-refused-before-decoding", "raw HTTPS client on the network, no Kubernetes credentials",
			"POST a review whose object nests 9,000 deep and whose operation is not even a string", func(t *testing.T, g Gomega) string {
				obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": fleeetv1.GroupVersion.String(), "kind": "Module",
					"metadata": map[string]any{"name": "deep", "namespace": tenantA}}}
				body := forged(g, "alice", "", obj, "Module")
				body = bytes.Replace(body, []byte(`"metadata":`), []byte(`"spec":`+string(deep(9000).Raw)+`,"metadata":`), 1)
				// A review the decoder would refuse: only a check that
				// runs before decoding answers with the depth.
				body = bytes.Replace(body, []byte(`"operation":"CREATE"`), []byte(`"operation":5`), 1)
				code, rev, err := review(f, body)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(rev.Response).NotTo(BeNil())
				g.Expect(rev.Response.Allowed).To(BeFalse())
				g.Expect(string(rev.Response.UID)).To(Equal("forged-1"))
				g.Expect(rev.Response.Result.Message).To(HavePrefix("spec.a.a"))
				g.Expect(rev.Response.Result.Message).To(ContainSubstring("nests deeper than 64 levels"))
				return fmt.Sprintf("HTTP %d, denied undecoded: %.80s…", code, rev.Response.Result.Message)
			}},
		{"window-never-opens", id, "Module with a rollout window on 30 February (0 0 30 2 *)", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", window("0 0 30 2 *", "", time.Hour))), "spec.rollout.windows[0].schedule", "never opens")
		}},
		{"window-schedule-does-not-parse", id, "Module with a rollout window scheduled \"every tuesday\"", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", window("every tuesday", "", time.Hour))), "spec.rollout.windows[0].schedule", "does not parse")
		}},
		{"window-bad-time-zone", id, "Module with a rollout window in time zone Mars/Olympus", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", window("0 9 * * *", "Mars/Olympus", time.Hour))), "spec.rollout.windows[0].timeZone")
		}},
		{"window-without-duration", id, "Module with a rollout window lasting 0s", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", window("0 9 * * *", "", 0))), "spec.rollout.windows[0].duration", "must be positive")
		}},
		{"approve-wrong-case", id, "Module annotated fleeet.dev/approve: 0A1B2C3D4E/Canary", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, staged(map[string]string{fleeetv1.ApproveAnnotation: "0A1B2C3D4E/Canary"})), approveForm)
		}},
		{"approve-padded", id, "Module annotated fleeet.dev/approve: \" 0a1b2c3d4e/canary \"", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, staged(map[string]string{fleeetv1.ApproveAnnotation: " 0a1b2c3d4e/canary "})), approveForm)
		}},
		{"approve-wildcard", id, "Module annotated fleeet.dev/approve: */*", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, staged(map[string]string{fleeetv1.ApproveAnnotation: "*/*"})), approveForm)
		}},
		{"approve-unknown-stage", id, "Module with stage canary annotated fleeet.dev/approve: 0a1b2c3d4e/prod", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, staged(map[string]string{fleeetv1.ApproveAnnotation: "0a1b2c3d4e/prod"})), `stage "prod" is not one of spec.rollout.stages`)
		}},
		{"undo-malformed", id, "Module annotated fleeet.dev/undo: latest", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, staged(map[string]string{fleeetv1.UndoAnnotation: "latest"})), "is not of the form <revision>")
		}},
		{"push-to-metadata-address", id, "push Remote whose kubeconfig server is http://169.254.169.254 (cloud instance metadata)", func(t *testing.T, g Gomega) string {
			cond := pushTo(g, "metadata", "http://169.254.169.254")
			g.Expect(cond.Message).To(ContainSubstring("169.254.0.0/16"))
			return fmt.Sprintf("Connected=False %s: %s", cond.Reason, cond.Message)
		}},
		{"push-to-link-local-ipv6", id, "push Remote whose kubeconfig server is https://[fe80::1]:6443", func(t *testing.T, g Gomega) string {
			cond := pushTo(g, "link-local", "https://[fe80::1]:6443")
			g.Expect(strings.Contains(cond.Message, "fe80::/10")).To(BeTrue(), cond.Message)
			return fmt.Sprintf("Connected=False %s: %s", cond.Reason, cond.Message)
		}},
	}
}
