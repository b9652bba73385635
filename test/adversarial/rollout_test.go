package adversarial_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/fleetctl"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// oversized fills a Module's sync past the manager's default
// --max-plan-bytes (the chart's 512 KiB), in values that pass every
// admission check of a Module.
func oversized(m *fleeetv1.Module) {
	m.Spec.Sync.Package.Kustomize.Substitute = map[string]string{}
	for i := range 600 {
		m.Spec.Sync.Package.Kustomize.Substitute[fmt.Sprintf("FILLER_%03d", i)] = strings.Repeat("x", 1000)
	}
}

// planOf returns, for Eventually, what the plan of team-a's Remote edge
// holds of each Module (its tag) and the compiler's stamps. The plan is
// read resolved, as its cluster reads it: it names a CompiledPlan, and its
// entries CompiledSyncs.
func planOf(ctx context.Context, f *fleet) func(Gomega) (map[string]string, map[string]fleeetv1.Compiled) {
	return func(g Gomega) (map[string]string, map[string]fleeetv1.Compiled) {
		pa := &fleeetv1.ProxyAssemblage{}
		g.Expect(f.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "edge"}, pa)).To(Succeed())
		store := plancontent.From(f.mgmt.Client, tenantA)
		stamps, err := plancontent.Stamps(ctx, pa, store)
		g.Expect(err).NotTo(HaveOccurred())
		resolved, err := plancontent.ResolvePlan(ctx, fleeetv1.ProxyPlan{pa}, store)
		g.Expect(err).NotTo(HaveOccurred())
		whole := &resolved[0].Spec
		g.Expect(compile.PlanBytes(whole)).To(BeNumerically("<=", compile.DefaultMaxPlanBytes), "the plan stays under the limit, resolved")
		tags := map[string]string{}
		for _, s := range whole.Assemblage.Syncs {
			if s.Source.Git != nil {
				tags[s.Name] = s.Source.Git.Tag
			}
		}
		return tags, stamps
	}
}

// warningsAbout returns the notes of the Warning events with reason about
// team-a's Module name.
func warningsAbout(ctx context.Context, g Gomega, f *fleet, name, reason string) []string {
	list := &eventsv1.EventList{}
	g.Expect(f.mgmt.Client.List(ctx, list, client.InNamespace(tenantA))).To(Succeed())
	var notes []string
	for _, e := range list.Items {
		if e.Type == "Warning" && e.Regarding.Kind == "Module" && e.Regarding.Name == name && e.Reason == reason {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

// cleanUp deletes team-a's Modules names once the attack is done, so the
// plan of edge is as the next attack expects it.
func cleanUp(t *testing.T, ctx context.Context, f *fleet, names ...string) {
	t.Cleanup(func() {
		for _, name := range names {
			_ = f.mgmt.Client.Delete(context.WithoutCancel(ctx), &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name}})
		}
	})
}

// gated returns a rolling update of team-a in two stages, each needing
// manual approval: canary holds cluster edge, rest the never-connected
// Remote other. Its repository, tagged v1.0.0 and v2.0.0, holds one
// ConfigMap, so edge becomes Ready at either version and stage canary, done,
// awaits its approval; the last stage holds nothing back, so a rollout
// needs two stages with Remotes to wait for an approval.
func gated(t *testing.T, f *fleet, name string) *fleeetv1.Module {
	files := map[string]string{
		"deploy/kustomization.yaml": "resources: [configmap.yaml]\n",
		"deploy/configmap.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n",
	}
	url, _ := f.git.Commit(t, tenantA+"-"+name, files, "v1.0.0")
	files["deploy/configmap.yaml"] += "data: {version: v2}\n"
	f.git.Commit(t, tenantA+"-"+name, files, "v2.0.0")
	return module(tenantA, name, func(m *fleeetv1.Module) {
		m.Spec.Sync.Source.Git.URL = url
		m.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"edge", "lab"}}}}
		m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Stages: []fleeetv1.RolloutStage{
				{Name: "canary", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "edge"}}, Approval: fleeetv1.ManualApproval},
				{Name: "rest", Approval: fleeetv1.ManualApproval},
			}}
	})
}

// rolloutOf returns, for Eventually, team-a's Module name's rollout status.
func rolloutOf(ctx context.Context, f *fleet, name string) func(Gomega) *fleeetv1.RolloutStatus {
	return func(g Gomega) *fleeetv1.RolloutStatus {
		m := &fleeetv1.Module{}
		g.Expect(f.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: name}, m)).To(Succeed())
		g.Expect(m.Status.Rollout).NotTo(BeNil())
		return m.Status.Rollout
	}
}

// annotate sets an annotation on team-a's Module name as alice.
func annotate(ctx context.Context, g Gomega, alice client.Client, name, key, value string) {
	g.Expect(annotated(ctx, alice, name, key, value)).To(Succeed())
}

// annotated sets an annotation on team-a's Module name as alice and
// returns the apiserver's answer: admission may refuse an approval or undo
// that can do nothing, which holds the attack as well as the controller
// ignoring it does.
func annotated(ctx context.Context, alice client.Client, name, key, value string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)
	return alice.Patch(ctx, &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name}},
		client.RawPatch(types.MergePatchType, patch))
}

func rolloutAttacks(ctx context.Context, f *fleet, alice client.Client, id string) []attack {
	admin := f.mgmt.Client
	retag := func(g Gomega, name, tag string) {
		g.Expect(alice.Patch(ctx, &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"sync":{"source":{"git":{"tag":%q}}}}}`, tag)))).To(Succeed())
	}
	// changedAfterGating creates the gated Module name, moves it from
	// v1.0.0 to v2.0.0 and returns the revision it had before.
	changedAfterGating := func(t *testing.T, g Gomega, name string) string {
		cleanUp(t, ctx, f, name)
		g.Expect(alice.Create(ctx, gated(t, f, name))).To(Succeed())
		old := ""
		g.Eventually(func(g Gomega) string { old = rolloutOf(ctx, f, name)(g).Revision; return old }).ShouldNot(BeEmpty())
		retag(g, name, "v2.0.0")
		g.Eventually(func(g Gomega) string { return rolloutOf(ctx, f, name)(g).Revision }).ShouldNot(Equal(old))
		return old
	}
	return []attack{
		{"oversized-module-does-not-stop-the-others", id,
			"create a Module whose sync passes --max-plan-bytes for cluster edge, then change another Module of team-a",
			func(t *testing.T, g Gomega) string {
				cleanUp(t, ctx, f, "routine", "hog")
				g.Expect(alice.Create(ctx, module(tenantA, "routine", nil))).To(Succeed())
				g.Eventually(func(g Gomega) map[string]string { tags, _ := planOf(ctx, f)(g); return tags }).Should(HaveKeyWithValue("routine", "v1.0.0"))
				g.Expect(alice.Create(ctx, module(tenantA, "hog", oversized))).To(Succeed())
				g.Eventually(func(g Gomega) string { _, stamps := planOf(ctx, f)(g); return stamps["hog"].TooLarge }).
					Should(ContainSubstring("left out of the plan of Remote edge"))
				retag(g, "routine", "v1.1.0")
				g.Eventually(func(g Gomega) map[string]string { tags, _ := planOf(ctx, f)(g); return tags }).
					Should(And(HaveKeyWithValue("routine", "v1.1.0"), Not(HaveKey("hog"))))
				var ready *metav1.Condition
				g.Eventually(func(g Gomega) string {
					m := &fleeetv1.Module{}
					g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "hog"}, m)).To(Succeed())
					ready = apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.ReadyCondition)
					g.Expect(ready).NotTo(BeNil())
					return ready.Reason
				}).Should(Equal(fleeetv1.ReasonPlanTooLarge))
				g.Eventually(func(g Gomega) []string { return warningsAbout(ctx, g, f, "hog", fleeetv1.ReasonPlanTooLarge) }).ShouldNot(BeEmpty())
				return "routine reached edge at v1.1.0; hog left out: " + ready.Message
			}},
		{"diff-previews-an-oversized-module-as-left-out", id,
			"fleetctl diff -f of a Module whose sync passes --max-plan-bytes for cluster edge",
			func(t *testing.T, g Gomega) string {
				raw, err := yaml.Marshal(module(tenantA, "hog-preview", func(m *fleeetv1.Module) {
					m.TypeMeta = metav1.TypeMeta{APIVersion: fleeetv1.GroupVersion.String(), Kind: "Module"}
					oversized(m)
				}))
				g.Expect(err).NotTo(HaveOccurred())
				file := filepath.Join(t.TempDir(), "hog.yaml")
				g.Expect(os.WriteFile(file, raw, 0o600)).To(Succeed())
				cmd := fleetctl.NewCommand()
				var out bytes.Buffer
				cmd.SetOut(&out)
				cmd.SetErr(&out)
				cmd.SetArgs([]string{"--kubeconfig", f.mgmt.Kubeconfig, "--as", "alice", "--as-group", "system:authenticated",
					"--namespace", tenantA, "diff", "-f", file})
				err = cmd.ExecuteContext(ctx)
				g.Expect(fleetctl.ExitCode(err)).To(Equal(1), "differences, not an error: %v\n%s", err, out.String())
				g.Expect(out.String()).To(ContainSubstring("left out: hog-preview: left out of the plan of Remote edge"))
				g.Expect(out.String()).NotTo(ContainSubstring("+ hog-preview"))
				return strings.TrimSpace(out.String())
			}},
		{"window-that-never-opens-holds-the-rollout", id,
			`rolling update whose only deployment window is "0 0 30 2 *" (30 February), then a new version`,
			func(t *testing.T, g Gomega) string {
				cleanUp(t, ctx, f, "feb30")
				err := alice.Create(ctx, module(tenantA, "feb30", func(m *fleeetv1.Module) {
					m.Spec.Rollout = fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
						Windows: []fleeetv1.RolloutWindow{{Schedule: "0 0 30 2 *", Duration: metav1.Duration{Duration: 24 * time.Hour}}}}
				}))
				if err != nil {
					// Admission refusing a window that never opens is the
					// first line; the controller's fail-closed check below
					// is the second, for windows admitted before it.
					return refused(g, err, "spec.rollout.windows[0].schedule")
				}
				// A Remote holding nothing takes the first version at once.
				g.Eventually(func(g Gomega) map[string]string { tags, _ := planOf(ctx, f)(g); return tags }).Should(HaveKeyWithValue("feb30", "v1.0.0"))
				retag(g, "feb30", "v2.0.0")
				g.Eventually(func(g Gomega) string {
					m := &fleeetv1.Module{}
					g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "feb30"}, m)).To(Succeed())
					stalled := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.StalledCondition)
					g.Expect(stalled).NotTo(BeNil())
					return stalled.Reason
				}).Should(Equal(fleeetv1.ReasonWindowNeverOpens))
				g.Consistently(func(g Gomega) map[string]string { tags, _ := planOf(ctx, f)(g); return tags }, 5*time.Second, poll).
					Should(HaveKeyWithValue("feb30", "v1.0.0"))
				var notes []string
				g.Eventually(func(g Gomega) []string {
					notes = warningsAbout(ctx, g, f, "feb30", fleeetv1.ReasonWindowNeverOpens)
					return notes
				}).Should(ContainElement(ContainSubstring(`spec.rollout.windows[0].schedule: "0 0 30 2 *" never opens`)))
				return "edge stays at v1.0.0; Stalled WindowNeverOpens; event: " + notes[0]
			}},
		{"approval-of-a-later-stage-approves-nothing", id,
			"fleeet.dev/approve=<revision>/rest while stage canary awaits approval",
			func(t *testing.T, g Gomega) string {
				cleanUp(t, ctx, f, "gated-later")
				g.Expect(alice.Create(ctx, gated(t, f, "gated-later"))).To(Succeed())
				var revision string
				g.Eventually(func(g Gomega) string {
					ro := rolloutOf(ctx, f, "gated-later")(g)
					revision = ro.Revision
					return ro.Holding
				}).Should(ContainSubstring("stage canary awaits approval"))
				if err := annotated(ctx, alice, "gated-later", fleeetv1.ApproveAnnotation, revision+"/rest"); err != nil {
					return refused(g, err)
				}
				var notes []string
				g.Eventually(func(g Gomega) []string {
					notes = warningsAbout(ctx, g, f, "gated-later", fleeetv1.ReasonApprovalIgnored)
					return notes
				}).Should(ConsistOf(ContainSubstring("names stage rest, which is not awaiting approval (stage canary is)")))
				g.Expect(rolloutOf(ctx, f, "gated-later")(g).Approved).To(BeEmpty())
				return "nothing approved; event: " + notes[0]
			}},
		{"approval-of-an-old-revision-approves-nothing", id,
			"fleeet.dev/approve=<previous revision>/canary after the Module changed",
			func(t *testing.T, g Gomega) string {
				old := changedAfterGating(t, g, "gated-old")
				if err := annotated(ctx, alice, "gated-old", fleeetv1.ApproveAnnotation, old+"/canary"); err != nil {
					return refused(g, err)
				}
				var notes []string
				g.Eventually(func(g Gomega) []string {
					notes = warningsAbout(ctx, g, f, "gated-old", fleeetv1.ReasonApprovalIgnored)
					return notes
				}).Should(ConsistOf(ContainSubstring("names revision " + old + ", not the current revision")))
				g.Eventually(func(g Gomega) string { return rolloutOf(ctx, f, "gated-old")(g).Holding }).
					Should(ContainSubstring("stage canary awaits approval"), "edge runs v2.0.0 and canary waits")
				g.Expect(rolloutOf(ctx, f, "gated-old")(g).Approved).To(BeEmpty())
				return "nothing approved; event: " + notes[0]
			}},
		{"undo-of-another-revision-rolls-nothing-back", id,
			"fleeet.dev/undo=<previous revision> after the Module changed",
			func(t *testing.T, g Gomega) string {
				old := changedAfterGating(t, g, "gated-undo")
				if err := annotated(ctx, alice, "gated-undo", fleeetv1.UndoAnnotation, old); err != nil {
					return refused(g, err)
				}
				var notes []string
				g.Eventually(func(g Gomega) []string {
					notes = warningsAbout(ctx, g, f, "gated-undo", fleeetv1.ReasonUndoIgnored)
					return notes
				}).Should(ConsistOf(ContainSubstring("names revision " + old + ", not the current revision")))
				g.Expect(rolloutOf(ctx, f, "gated-undo")(g).RolledBack).To(BeNil())
				return "nothing rolled back; event: " + notes[0]
			}},
		{"approval-warning-is-not-repeated", id,
			"a well-formed approval naming no waiting stage, left in place while the Module reconciles again and again",
			func(t *testing.T, g Gomega) string {
				cleanUp(t, ctx, f, "gated-quiet")
				g.Expect(alice.Create(ctx, gated(t, f, "gated-quiet"))).To(Succeed())
				var revision string
				// Once canary waits, the rollout stands still: each reconcile
				// finds the same thing to say about the approval.
				g.Eventually(func(g Gomega) string {
					ro := rolloutOf(ctx, f, "gated-quiet")(g)
					revision = ro.Revision
					return ro.Holding
				}).Should(ContainSubstring("stage canary awaits approval"))
				if err := annotated(ctx, alice, "gated-quiet", fleeetv1.ApproveAnnotation, revision+"/rest"); err != nil {
					return refused(g, err)
				}
				g.Eventually(func(g Gomega) []string {
					return warningsAbout(ctx, g, f, "gated-quiet", fleeetv1.ReasonApprovalIgnored)
				}).
					Should(HaveLen(1))
				// Every change of the Module's annotations reconciles it.
				for i := range 5 {
					annotate(ctx, g, alice, "gated-quiet", "example.com/poke", fmt.Sprint(i))
				}
				g.Consistently(func(g Gomega) []string {
					return warningsAbout(ctx, g, f, "gated-quiet", fleeetv1.ReasonApprovalIgnored)
				}, 5*time.Second, poll).
					Should(ConsistOf(ContainSubstring("names stage rest, which is not awaiting approval")))
				return "one ApprovalIgnored event for five reconciles"
			}},
	}
}
