package adversarial_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// admissionAttacks are tenants' and network clients' attempts on what the
// admission webhook judges: deeply nested reviews and reviews holding too
// many JSON nodes, rollout windows that can never open, malformed rollout
// annotations, and push Remotes and sources aimed at cloud metadata
// addresses.
func admissionAttacks(ctx context.Context, f *fleet, alice client.Client, id string) []attack {
	window := func(schedule, zone string, d time.Duration) func(*fleeetv1.Module) {
		return func(m *fleeetv1.Module) {
			m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
			m.Spec.Rollout.Windows = []fleeetv1.RolloutWindow{{Schedule: schedule, TimeZone: zone, Duration: metav1.Duration{Duration: d}}}
		}
	}
	staged := func(annotations map[string]string) *fleeetv1.Module {
		return module(tenantA, "staged", func(m *fleeetv1.Module) {
			m.Annotations = annotations
			m.Spec.Rollout.Strategy = fleeetv1.RollingUpdateStrategy
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
		return pushRemoteRefused(ctx, g, f, alice, name, kubeconfig(server, "", "    token: inline\n", ""), func(g Gomega, r *fleeetv1.Remote) {
			cond := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.ConnectedCondition)
			g.Expect(cond.Message).To(ContainSubstring("a denied network (--push-networks-deny)"))
		})
	}
	return []attack{
		{"forged-reviews-grow-no-metric-series", "raw HTTPS client on the network, no Kubernetes credentials",
			"POST 200 AdmissionReviews, each with a new kind, operation and namespace; scrape the manager's metrics as Prometheus", func(t *testing.T, g Gomega) string {
				token := testenv.MetricsReaderToken(t, f.mgmt, "fleet-manager-metrics-reader")
				series := func() (int, string) {
					body := testenv.Metrics(g, f.managerMetrics, token)
					return len(regexp.MustCompile(`(?m)^fleeet_admission_\S*\{[^}]*"other"`).FindAllString(body, -1)), body
				}
				forge := func(i int) []byte {
					obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": fleeetv1.GroupVersion.String(), "kind": "Module",
						"metadata": map[string]any{"name": "m", "namespace": tenantA}}}
					body := forged(g, "alice", "", obj, "Module")
					body = bytes.Replace(body, []byte(`"kind":"Module"},"resource"`), fmt.Appendf(nil, `"kind":"Forged%d"},"resource"`, i), 1)
					body = bytes.Replace(body, []byte(`"operation":"CREATE"`), fmt.Appendf(nil, `"operation":"FORGED%d"`, i), 1)
					body = bytes.Replace(body, []byte(`"namespace":"`+tenantA+`","operation"`), fmt.Appendf(nil, `"namespace":"forged-%d","operation"`, i), 1)
					for _, forgery := range []string{`"kind":"Forged%d"`, `"operation":"FORGED%d"`, `"namespace":"forged-%d"`} {
						g.Expect(string(body)).To(ContainSubstring(forgery, i), "the review carries the forged value")
					}
					return body
				}
				// The first forged review may open the bounded "other"
				// series; what is counted is what the next 199 add to
				// them (the manager's own traffic may add known kinds).
				_, _, err := review(f, forge(0))
				g.Expect(err).NotTo(HaveOccurred())
				before, _ := series()
				g.Expect(before).To(BeNumerically(">", 0), "the first forged review is counted, under other")
				for i := 1; i < 200; i++ {
					_, _, err := review(f, forge(i))
					g.Expect(err).NotTo(HaveOccurred())
				}
				after, body := series()
				g.Expect(body).NotTo(ContainSubstring("Forged1"), "a forged kind became a label")
				g.Expect(body).NotTo(ContainSubstring("FORGED1"), "a forged operation became a label")
				g.Expect(body).NotTo(ContainSubstring("forged-1"), "a forged namespace became a label")
				g.Expect(after).To(Equal(before), "199 forged reviews added metric series")
				return fmt.Sprintf("fleeet_admission_* series labelled other: %d before 199 forged reviews, %d after; no forged kind, operation or namespace among the labels", before, after)
			}},
		{"deep-review-refused-before-decoding", "raw HTTPS client on the network, no Kubernetes credentials",
			"POST a review whose object nests 9,000 deep and whose operation is not even a string", func(t *testing.T, g Gomega) string {
				return refusedUndecoded(g, f, "deep", string(deep(9000).Raw),
					And(HavePrefix("spec.a.a"), ContainSubstring("nests deeper than 64 levels")))
			}},
		{"wide-review-refused-before-decoding", "raw HTTPS client on the network, no Kubernetes credentials",
			"POST a review whose object holds 100,000 JSON nodes and whose operation is not even a string", func(t *testing.T, g Gomega) string {
				return refusedUndecoded(g, f, "wide", `{"values":[0`+strings.Repeat(",0", 100_000-1)+`]}`,
					HavePrefix("spec.values: the object holds more than 20000 JSON nodes"))
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
		{"source-at-metadata-address", id, "Module whose git source is https://169.254.169.254/latest/meta-data.git (fetched by Flux inside the cluster)", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source.Git.URL = "https://169.254.169.254/latest/meta-data.git"
			})), "spec.sync.source.git.url: 169.254.169.254 lies in 169.254.0.0/16, a denied network (--source-networks-deny)")
		}},
		{"source-at-a-number", id, "Module whose helm source is http://2852039166/ (169.254.169.254 written as one number)", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source = fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://2852039166/charts", Chart: "c", Version: "1.0.0"}}
				m.Spec.Sync.Package = fleeetv1.Package{Helm: &fleeetv1.HelmPackage{ReleaseName: "c", TargetNamespace: tenantA}}
			})), "spec.sync.source.helm.url", "in a form other than dotted decimal")
		}},
		{"source-at-metadata-name", id, "Module whose git source is ssh://git@metadata.google.internal/repo.git", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source.Git.URL = "ssh://git@metadata.google.internal/repo.git"
				m.Spec.Sync.Source.SecretRef = &fleeetv1.LocalObjectReference{Name: "git-ssh"}
			})), "spec.sync.source.git.url", "names a cloud metadata service")
		}},
		{"oci-source-at-metadata-address", id, "Module whose OCI source is oci://169.254.169.254/latest (fetched by Flux inside the cluster)", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source = fleeetv1.Source{OCI: &fleeetv1.OCISource{URL: "oci://169.254.169.254/meta-data", Tag: "v1"}}
			})), "spec.sync.source.oci.url: 169.254.169.254 lies in 169.254.0.0/16")
		}},
		{"ssh-source-without-host-key", id, "Module whose git source is ssh:// with no secretRef, so no known_hosts to check the server against", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source.Git.URL = "ssh://git@git.example.com/platform.git"
			})), "spec.sync.source", "an ssh:// git source needs secretRef")
		}},
		{"source-at-mapped-ipv6", id, "Module whose git source is https://[::ffff:169.254.169.254]/repo.git", func(t *testing.T, g Gomega) string {
			return refused(g, alice.Create(ctx, module(tenantA, "m", func(m *fleeetv1.Module) {
				m.Spec.Sync.Source.Git.URL = "https://[::ffff:169.254.169.254]/repo.git"
			})), "spec.sync.source.git.url: 169.254.169.254 lies in 169.254.0.0/16")
		}},
	}
}

// refusedUndecoded forges a review of a Module named name in tenant A
// whose spec is the JSON spec and whose operation the decoder would refuse,
// so only a check that runs before decoding can answer; it expects a
// denial whose message matches want, and describes it.
func refusedUndecoded(g Gomega, f *fleet, name, spec string, want types.GomegaMatcher) string {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": fleeetv1.GroupVersion.String(), "kind": "Module",
		"metadata": map[string]any{"name": name, "namespace": tenantA}}}
	body := forged(g, "alice", "", obj, "Module")
	body = bytes.Replace(body, []byte(`"metadata":`), []byte(`"spec":`+spec+`,"metadata":`), 1)
	body = bytes.Replace(body, []byte(`"operation":"CREATE"`), []byte(`"operation":5`), 1)
	code, rev, err := review(f, body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rev.Response).NotTo(BeNil())
	g.Expect(rev.Response.Allowed).To(BeFalse())
	g.Expect(string(rev.Response.UID)).To(Equal("forged-1"))
	g.Expect(rev.Response.Result.Message).To(want)
	return fmt.Sprintf("HTTP %d, denied undecoded: %.80s…", code, rev.Response.Result.Message)
}
