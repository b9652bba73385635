package webhooks

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/policy"
)

// A namespace created a moment before the object being judged may not be in
// the cache yet; the look-up must then ask the apiserver instead of failing
// the request.
func TestANamespaceTheCacheHasNotSeenIsReadLive(t *testing.T) {
	created := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-new", Labels: map[string]string{"team": "a"}}}
	p := &Policies{
		Reader:     fake.NewClientBuilder().Build(),
		LiveReader: fake.NewClientBuilder().WithObjects(created).Build(),
	}
	ns, err := p.namespace(context.Background(), "tenant-new")
	if err != nil {
		t.Fatalf("looking up a namespace only the apiserver knows: %v", err)
	}
	if ns.Labels["team"] != "a" {
		t.Fatalf("labels = %v, want the live namespace's", ns.Labels)
	}
	if _, err := p.namespace(context.Background(), "tenant-gone"); !apierrors.IsNotFound(err) {
		t.Fatalf("a namespace that does not exist: err = %v, want NotFound", err)
	}
}

// Anyone who reaches the webhook port can send any kind and operation:
// however many distinct values arrive, the metric series stay a bounded
// set.
func TestForgedKindsAndOperationsLeaveMetricSeriesBounded(t *testing.T) {
	g := NewWithT(t)
	p := &Policies{Reader: fake.NewClientBuilder().Build(), LiveReader: fake.NewClientBuilder().Build(), Timeout: time.Second}
	send := func(kind, op string) {
		p.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Kind: metav1.GroupVersionKind{Group: "fleeet.dev", Version: "v1alpha1", Kind: kind}, Operation: admissionv1.Operation(op), Namespace: "nowhere"}})
	}
	send("Module", "CREATE")
	for i := range 200 {
		send(fmt.Sprintf("Kind%d", i), fmt.Sprintf("OP%d", i))
	}
	before := testutil.CollectAndCount(requests) + testutil.CollectAndCount(evaluation)
	for i := range 500 {
		send(fmt.Sprintf("Other%d", i), fmt.Sprintf("X%d", i))
	}
	g.Expect(testutil.CollectAndCount(requests) + testutil.CollectAndCount(evaluation)).To(Equal(before))
	g.Expect(testutil.CollectAndCount(requests)).To(BeNumerically("<=", 2*len(knownKinds)*(len(knownOperations)+1)))
}

// Content is judged once, when it is stored: a user policy over what a
// sync holds (here through lib.syncs) refuses the CompiledSync's create, and
// a plan holding such a sync whole. A plan entry naming content is judged as
// written, its name, content and Secrets, without reading the CompiledSync,
// which neither needs to be there nor refuses the plan when it is; and the
// size policy weighs the plan as written too.
func TestPoliciesJudgeContentWhenStoredAndPlansAsWritten(t *testing.T) {
	const manager = "system:serviceaccount:fleeet-system:fleet-manager"
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, fleeetv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	engine, err := policy.New(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.SetUserPolicies(t.Context(), map[string]string{
		"hosts.rego": `package fleeet.hosts
import data.fleeet.lib
deny contains msg if {
	some s in lib.syncs
	contains(s.source.git.url, "git.evil.example.com")
	msg := sprintf("sync %s: git.evil.example.com is not a source host of ours", [s.name])
}`,
		// A rule about which Modules a Remote may hold, whether its plan
		// holds them itself or names a CompiledPlan holding them.
		"placement.rego": `package fleeet.placement
deny contains msg if {
	input.context.plan.remote.labels.env == "prod"
	"web" in input.context.plan.syncs
	msg := sprintf("Module web may not run on production Remote %s", [input.context.plan.remote.name])
}`,
		// Shows what a policy sees of the entries of plan edge-watched.
		"entries.rego": `package fleeet.entries
deny contains msg if {
	input.request.kind.kind == "ProxyAssemblage"
	input.request.name == "edge-watched"
	some s in input.object.spec.assemblage.syncs
	msg := sprintf("entry %s: content %q, source %v", [s.name, object.get(s, "content", ""), object.get(s, "source", {})])
}`,
	}); err != nil {
		t.Fatal(err)
	}
	const refusal = "sync web: git.evil.example.com is not a source host of ours"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{fleeetv1.TenantLabel: "true"}}}
	module := &metav1.ObjectMeta{Namespace: ns.Name, Name: "web", UID: "module-uid"}
	sync := func(url string) *fleeetv1.NamedSync {
		return &fleeetv1.NamedSync{Name: "web", SyncSpec: fleeetv1.SyncSpec{
			Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: url, Tag: "v1.0.0"}},
			Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./" + strings.Repeat("deploy/", 40)}},
		}}
	}
	good, evil := sync("https://git.example.com/web.git"), sync("https://git.evil.example.com/web.git")
	content := func(s *fleeetv1.NamedSync) *fleeetv1.CompiledSync {
		cs := plancontent.New(module, plancontent.Name(module, s), s)
		cs.APIVersion, cs.Kind = fleeetv1.GroupVersion.String(), "CompiledSync"
		return cs
	}
	request := func(kind, resource, name string, obj any) admission.Request {
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Kind:      metav1.GroupVersionKind{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Kind: kind},
			Resource:  metav1.GroupVersionResource{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Resource: resource},
			Namespace: ns.Name, Name: name, Operation: admissionv1.Create,
			UserInfo: authenticationv1.UserInfo{Username: manager},
			Object:   runtime.RawExtension{Raw: raw},
		}}
	}
	store := func(s *fleeetv1.NamedSync) admission.Request {
		cs := content(s)
		return request("CompiledSync", "compiledsyncs", cs.Name, cs)
	}
	// plan is the plan of Remote name holding syncs, thin names s's
	// CompiledSync and whole holds s.
	plan := func(name string, syncs ...fleeetv1.NamedSync) *fleeetv1.ProxyAssemblage {
		pa := &fleeetv1.ProxyAssemblage{TypeMeta: metav1.TypeMeta{APIVersion: fleeetv1.GroupVersion.String(), Kind: "ProxyAssemblage"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name}}
		pa.Spec.Assemblage.Syncs = syncs
		return pa
	}
	thin := func(name string, s *fleeetv1.NamedSync) *fleeetv1.ProxyAssemblage {
		return plan(name, plancontent.Entry(s, plancontent.Name(module, s)))
	}
	// shared is the plan of Remote name naming a CompiledPlan that holds
	// the entry of s, with the CompiledPlan.
	shared := func(name string, s *fleeetv1.NamedSync) (*fleeetv1.ProxyAssemblage, *fleeetv1.CompiledPlan) {
		cp := plancontent.NewPlan(ns.Name, []fleeetv1.NamedSync{plancontent.Entry(s, plancontent.Name(module, s))}, nil)
		pa := plan(name)
		pa.Spec.CompiledPlan = cp.Name
		pa.OwnerReferences = []metav1.OwnerReference{{APIVersion: fleeetv1.GroupVersion.String(), Kind: "Remote", Name: name, UID: "remote-uid", Controller: ptr.To(true)}}
		return pa, cp
	}
	remote := func(name, env string) *fleeetv1.Remote {
		return &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name, Labels: map[string]string{"env": env}}}
	}
	prodPlan, prodShared := shared("edge-prod", good)
	devPlan, devShared := shared("edge-dev", good)
	write := func(pa *fleeetv1.ProxyAssemblage) admission.Request {
		return request("ProxyAssemblage", "proxyassemblages", pa.Name, pa)
	}
	// Limits between the plan's size as written and as resolved, and
	// below it.
	size := func(pa *fleeetv1.ProxyAssemblage) int {
		raw, err := json.Marshal(pa.Spec)
		if err != nil {
			t.Fatal(err)
		}
		return len(raw)
	}
	thinBytes, wholeBytes := size(thin("edge", good)), size(plan("edge", *good))
	between := (thinBytes + wholeBytes) / 2

	for name, tc := range map[string]struct {
		cached       []client.Object
		live         []client.Object // what only the apiserver holds yet
		request      admission.Request
		maxPlanBytes int
		// want is what the response says; "" means it is allowed.
		want []string
	}{
		"content of a host of ours":           {request: store(good)},
		"content of a refused host":           {request: store(evil), want: []string{refusal}},
		"a sync of a refused host held whole": {request: write(plan("edge", *evil)), want: []string{refusal}},
		"a plan naming content the cache holds, refused when stored": {cached: []client.Object{content(evil)},
			request: write(thin("edge", evil))},
		"a plan naming content nobody holds": {request: write(thin("edge", evil))},
		"the entries as written": {cached: []client.Object{content(good)}, request: write(thin("edge-watched", good)),
			want: []string{fmt.Sprintf(`entry web: content %q, source {}`, plancontent.Name(module, good))}},
		"a Module a rule keeps off the Remote, in the CompiledPlan the plan names": {cached: []client.Object{prodShared, remote("edge-prod", "prod")},
			request: write(prodPlan), want: []string{"Module web may not run on production Remote edge-prod"}},
		"the CompiledPlan the cache has not seen yet": {cached: []client.Object{remote("edge-prod", "prod")}, live: []client.Object{prodShared},
			request: write(prodPlan), want: []string{"Module web may not run on production Remote edge-prod"}},
		"the Module on a Remote the rule lets it run on": {cached: []client.Object{devShared, remote("edge-dev", "dev")}, request: write(devPlan)},
		"a plan naming a CompiledPlan nobody holds": {cached: []client.Object{remote("edge-prod", "prod")}, request: write(prodPlan),
			want: []string{"could not be evaluated", "reading CompiledPlan " + prodShared.Name}},
		"the plan weighed as written": {cached: []client.Object{content(good)}, request: write(thin("edge", good)),
			maxPlanBytes: between},
		"a plan as written over the limit": {request: write(thin("edge", good)), maxPlanBytes: thinBytes - 1,
			want: []string{fmt.Sprintf("spec: the plan of Remote edge is %d bytes, over the %d-byte limit", thinBytes, thinBytes-1)}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			p := &Policies{Engine: engine, ManagerUsername: manager, MaxPlanBytes: cmp.Or(tc.maxPlanBytes, 512<<10),
				Reader:     fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(tc.cached, ns)...).Build(),
				LiveReader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(tc.live, ns)...).Build(),
				Timeout:    10 * time.Second}
			resp := p.Handle(t.Context(), tc.request)
			if judged, err := p.Judge(t.Context(), tc.request); err != nil {
				g.Expect(resp.Result.Message).To(ContainSubstring(err.Error()), "the webhook denies what keeps Judge from a decision")
			} else {
				g.Expect(judged).To(Equal(resp), "judged in process as the webhook judges it")
			}
			if len(tc.want) == 0 {
				g.Expect(resp.Allowed).To(BeTrue(), "refused: %v", resp.Result)
				return
			}
			g.Expect(resp.Allowed).To(BeFalse())
			for _, w := range tc.want {
				g.Expect(resp.Result.Message).To(ContainSubstring(w))
			}
		})
	}
}

// Judge reports what keeps it from a decision as an error, where Handle
// denies, saying so.
func TestJudgeReturnsAnErrorWhereHandleDenies(t *testing.T) {
	g := NewWithT(t)
	p := &Policies{Reader: fake.NewClientBuilder().Build(), LiveReader: fake.NewClientBuilder().Build(), Timeout: time.Second}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Kind: metav1.GroupVersionKind{Group: "fleeet.dev", Version: "v1alpha1", Kind: "ProxyAssemblage"}, Operation: admissionv1.Create, Namespace: "nowhere"}}
	_, err := p.Judge(t.Context(), req)
	g.Expect(err).To(MatchError(ContainSubstring("looking up namespace nowhere")))
	resp := p.Handle(t.Context(), req)
	g.Expect(resp.Allowed).To(BeFalse())
	g.Expect(resp.Result.Message).To(HavePrefix("denied because the admission policies could not be evaluated: looking up namespace nowhere"))
}
