package compiler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// reviewLimit is the manager webhook's bound on an AdmissionReview's body
// (internal/webhooks maxReviewBytes). An update's review carries the
// object and the old object.
const reviewLimit = 7 << 20

// BenchmarkPlanSize measures how many Modules fit in one Remote's plan:
// for each kind of sync it prints the size one sync adds to a plan by the
// size policy's measure (compile.PlanBytes), and the largest number of
// Modules whose plan fits (a) under the default --max-plan-bytes, (b) in
// etcd, found by writing ever larger plans to the real apiserver and
// etcd (default --max-request-bytes, 1.5 MiB) until they are refused,
// spec and the agent's status of every sync Ready, for the management
// cluster's ProxyAssemblage and the downstream Assemblage, and (c) under
// the webhook's review limit, an update carrying the object twice.
func BenchmarkPlanSize(b *testing.B) {
	ns := cluster.Namespace(b, "plansize", nil)
	for _, kind := range planSyncKinds() {
		b.Run(kind.name, func(b *testing.B) {
			for b.Loop() {
				perSync := compile.PlanBytes(planOf(kind.sync, 2)) - compile.PlanBytes(planOf(kind.sync, 1))
				byLimit := largest(func(n int) bool { return compile.PlanBytes(planOf(kind.sync, n)) <= compile.DefaultMaxPlanBytes })
				pa := largestStored(b, ns, &fleeetv1.ProxyAssemblage{}, kind.sync)
				asm := largestStored(b, ns, &fleeetv1.Assemblage{}, kind.sync)
				review := largest(func(n int) bool {
					return 2*len(mustJSON(b, sizedObject(&fleeetv1.ProxyAssemblage{}, ns, kind.sync, n)))+1024 <= reviewLimit
				})
				b.ReportMetric(float64(perSync), "plan-bytes/sync")
				b.ReportMetric(float64(byLimit), "modules@max-plan-bytes")
				b.ReportMetric(float64(pa), "modules@etcd-ProxyAssemblage")
				b.ReportMetric(float64(asm), "modules@etcd-Assemblage")
				b.ReportMetric(float64(review), "modules@webhook-review")
			}
		})
	}
}

// planSyncKind is one kind of sync a plan holds, compiled as the manager
// compiles it.
type planSyncKind struct {
	name string
	sync fleeetv1.NamedSync
}

// planSyncKinds are realistic syncs: a git kustomize sync with a path and
// two substitutions; a helm sync with a modest values document; and that
// helm sync compiled for a Remote picked by a region and a prod override.
func planSyncKinds() []planSyncKind {
	labels := map[string]string{"team": "payments", "tier": "app"}
	git := fleeetv1.SyncSpec{
		Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/platform/payments-api.git", Tag: "v1.24.3"}},
		Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy/overlays/prod",
			Substitute: map[string]string{"ENV": "prod", "SIZE": "m"}}},
	}
	helm := fleeetv1.SyncSpec{
		Source: fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "podinfo", Version: "6.7.1"}},
		Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{Values: &apiextensionsv1.JSON{Raw: []byte(
			`{"replicaCount":2,"ui":{"message":"hello","color":"#34577c"},"resources":{"requests":{"cpu":"10m","memory":"16Mi"},` +
				`"limits":{"memory":"64Mi"}},"ingress":{"enabled":true,"hosts":[{"host":"payments.example.com","paths":[{"path":"/"}]}]}}`)}}},
	}
	m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "payments-api-0000", Labels: labels},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Sync: helm, Overrides: []fleeetv1.Override{
			{Name: "eu", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}},
				Helm: &fleeetv1.HelmOverride{Values: &apiextensionsv1.JSON{Raw: []byte(`{"ui":{"message":"hello from eu"},"ingress":{"hosts":[{"host":"payments.eu.example.com","paths":[{"path":"/"}]}]}}`)}}},
			{Name: "prod", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
				Helm: &fleeetv1.HelmOverride{Values: &apiextensionsv1.JSON{Raw: []byte(`{"replicaCount":3}`)}}},
		}}}}
	r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge-0001", Labels: map[string]string{"region": "eu", "env": "prod"}}}
	overridden, err := compile.Sync(context.Background(), nil, m, &m.Spec.SyncPlacement, r) // no control-plane bindings: nothing is read
	if err != nil {
		panic(err)
	}
	return []planSyncKind{
		{"git-kustomize", fleeetv1.NamedSync{Name: "payments-api-0000", Labels: labels, SyncSpec: git}},
		{"helm-values", fleeetv1.NamedSync{Name: "payments-api-0000", Labels: labels, SyncSpec: helm}},
		{"helm-values-overrides", overridden},
	}
}

// planOf is a plan of n copies of sync, each named after its Module.
func planOf(sync fleeetv1.NamedSync, n int) *fleeetv1.ProxyAssemblageSpec {
	spec := &fleeetv1.ProxyAssemblageSpec{}
	for i := range n {
		s := *sync.DeepCopy()
		s.Name = fmt.Sprintf("payments-api-%04d", i)
		spec.Assemblage.Syncs = append(spec.Assemblage.Syncs, s)
	}
	return spec
}

// sizedObject is a ProxyAssemblage or Assemblage (into) of n syncs as the
// fleet writes it: the compiler's stamps on a plan, and the status the
// agent reports with every sync Ready and its workloads healthy.
func sizedObject(into client.Object, ns string, sync fleeetv1.NamedSync, n int) client.Object {
	spec := planOf(sync, n)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	st := fleeetv1.AssemblageStatus{ObservedGeneration: 1, Summary: fleeetv1.SyncSummary{Total: int32(n), Ready: int32(n)},
		Conditions: []metav1.Condition{{Type: fleeetv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Synced",
			Message: fmt.Sprintf("%d of %d syncs Ready", n, n), LastTransitionTime: now, ObservedGeneration: 1}}}
	stamps := map[string]fleeetv1.Compiled{}
	for _, s := range spec.Assemblage.Syncs {
		stamps[s.Name] = fleeetv1.Compiled{Generation: 3, Revision: "a1b2c3d4e5"}
		revision := "v1.24.3@sha1:0123456789abcdef0123456789abcdef01234567"
		st.Syncs = append(st.Syncs, fleeetv1.SyncStatus{Name: s.Name, State: fleeetv1.SyncReady, Revision: revision,
			Message: "Applied revision: " + revision, LastTransitionTime: &now,
			Health: &fleeetv1.WorkloadHealth{Workloads: 1, ReadyPods: 3, DesiredPods: 3}})
	}
	name := fmt.Sprintf("size-%d", n)
	switch o := into.(type) {
	case *fleeetv1.ProxyAssemblage:
		o.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{fleeetv1.CompiledAnnotation: string(must(json.Marshal(stamps)))}}
		o.Spec, o.Status = *spec, st
	case *fleeetv1.Assemblage:
		o.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{fleeetv1.UpstreamAnnotation: "fleeet-system/management"}}
		o.Spec, o.Status = spec.Assemblage, st
		o.Spec.ServiceAccountName = "payments"
	}
	return into
}

// largestStored is the largest number of syncs of a plan object (into)
// the apiserver stores, with its status; it logs why one more is refused.
// A write that times out on this loaded machine is tried again, so that
// it does not pass for the limit.
func largestStored(b *testing.B, ns string, into client.Object, sync fleeetv1.NamedSync) int {
	refusal := func(n int) error {
		for range 5 {
			err := store(b, ns, into, sync, n)
			if !transient(err) {
				return err
			}
			b.Logf("%T of %d syncs: %v; trying again", into, n, err)
		}
		b.Fatalf("%T of %d syncs: the apiserver keeps timing out", into, n)
		return nil
	}
	n := largest(func(n int) bool { return refusal(n) == nil })
	b.Logf("%T of %d syncs refused: %.300v", into, n+1, refusal(n+1))
	return n
}

// transient reports whether a write failed for the apiserver's load
// rather than for what was written.
func transient(err error) bool {
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
		errors.Is(err, context.DeadlineExceeded)
}

// store writes a plan object of n syncs with its status as the fleet
// writes it (spec, then status), deletes it again and returns the
// apiserver's refusal, if any.
func store(b *testing.B, ns string, into client.Object, sync fleeetv1.NamedSync, n int) error {
	obj := sizedObject(into, ns, sync, n)
	reported := statusOf(obj).DeepCopy() // create leaves status out
	c := cluster.Client
	// A create that timed out may have been stored all the same.
	if err := c.Delete(b.Context(), obj.DeepCopyObject().(client.Object)); client.IgnoreNotFound(err) != nil {
		return err
	}
	if err := c.Create(b.Context(), obj); err != nil {
		return err
	}
	defer func() {
		if err := c.Delete(b.Context(), obj); err != nil {
			b.Fatal(err)
		}
	}()
	*statusOf(obj) = *reported
	return c.Status().Update(b.Context(), obj)
}

// statusOf is the status of a ProxyAssemblage or Assemblage.
func statusOf(obj client.Object) *fleeetv1.AssemblageStatus {
	if pa, ok := obj.(*fleeetv1.ProxyAssemblage); ok {
		return &pa.Status
	}
	return &obj.(*fleeetv1.Assemblage).Status
}

// largest is the largest n in [1, 20000] for which fits holds, fits
// holding for every smaller n; 0 when not even one fits.
func largest(fits func(n int) bool) int {
	return sort.Search(20000, func(n int) bool { return !fits(n + 1) })
}

func mustJSON(b *testing.B, v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func must(raw []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return raw
}

// BenchmarkPlanParts is the proof that a Remote selected by 2,000 Modules
// gets its whole plan at the manager's default limits (--max-plan-bytes
// 512 KiB and 512 syncs a part), on an apiserver of its own with the
// manager's admission webhook judging every part: 2,000 git kustomize
// Modules (planSyncKinds) select one Remote; it reports the parts the plan
// takes and how long from the first Module's creation until the plan is
// whole with every sync, then how many parts a version change of one Module
// rewrites (part 0 and the part holding it) and how long the change takes
// to reach the plan. No Module is stamped TooLarge.
func BenchmarkPlanParts(b *testing.B) {
	const modules = 2000
	g := NewWithT(b)
	c := compilerBehindWebhook(b, compile.DefaultMaxPlanBytes, compile.DefaultMaxPlanBytes)
	ns := c.Namespace(b, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}}
	g.Eventually(func() error { return c.Client.Create(b.Context(), r) }, timeout, poll).Should(Succeed()) // once the webhook answers
	git := planSyncKinds()[0].sync
	module := func(i int) *fleeetv1.Module {
		return &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("payments-api-%04d", i), Labels: git.Labels},
			Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Selector: everyRemote, Sync: *git.SyncSpec.DeepCopy()}}}
	}
	whole := func(g Gomega) fleeetv1.ProxyPlan {
		return fleettest.WholePlan(g, c.Client, r, compile.DefaultMaxPlanBytes)
	}
	for b.Loop() {
		started := time.Now()
		indexes := make(chan int)
		var created sync.WaitGroup
		for range 8 {
			created.Go(func() {
				for i := range indexes {
					g.Expect(c.Client.Create(b.Context(), module(i))).To(Succeed())
				}
			})
		}
		for i := range modules {
			indexes <- i
		}
		close(indexes)
		created.Wait()
		var plan fleeetv1.ProxyPlan
		g.Eventually(func(g Gomega) {
			plan = whole(g)
			g.Expect(syncsIn(plan)).To(Equal(modules))
		}, 15*time.Minute, time.Second).Should(Succeed())
		b.ReportMetric(time.Since(started).Seconds(), "s-to-whole-plan")
		b.ReportMetric(float64(len(plan)), "parts")
		for _, pa := range plan {
			for name, stamp := range pa.CompiledSyncs() {
				g.Expect(stamp.TooLarge).To(BeEmpty(), name)
			}
		}

		versions := map[string]string{}
		for _, pa := range plan {
			versions[pa.Name] = pa.ResourceVersion
		}
		holding := plan[len(plan)-1]
		changed := holding.Spec.Assemblage.Syncs[0].Name
		started = time.Now()
		g.Expect(c.Client.Patch(b.Context(), &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: changed}},
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"sync":{"source":{"git":{"tag":"v1.24.4"}}}}}`)))).To(Succeed())
		g.Eventually(func(g Gomega) string {
			return compile.Find(whole(g).Holding(changed).Spec.Assemblage.Syncs, changed).Source.Git.Tag
		}, timeout, 100*time.Millisecond).Should(Equal("v1.24.4"))
		b.ReportMetric(time.Since(started).Seconds(), "s-version-change")
		var rewritten []string
		g.Consistently(func(g Gomega) []string {
			rewritten = nil
			for _, pa := range whole(g) {
				if pa.ResourceVersion != versions[pa.Name] {
					rewritten = append(rewritten, pa.Name)
				}
			}
			return rewritten
		}, 5*time.Second, time.Second).Should(ConsistOf(r.Name, holding.Name))
		b.ReportMetric(float64(len(rewritten)), "parts-rewritten")
	}
}

// syncsIn counts the syncs of every part of plan.
func syncsIn(plan fleeetv1.ProxyPlan) int {
	n := 0
	for _, pa := range plan {
		n += len(pa.Spec.Assemblage.Syncs)
	}
	return n
}
