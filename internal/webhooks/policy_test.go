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

// A plan entry that names a CompiledSync is judged as the sync it names:
// a user policy refusing a source host refuses it there as it did in whole
// plans, the size policy weighs the resolved plan, and content that cannot
// be read refuses the plan, naming it. The compiler creates a CompiledSync
// a moment before the plan, so one only the apiserver holds yet counts.
func TestPoliciesJudgeThePlanWithTheSyncsItsEntriesName(t *testing.T) {
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
	const refusal = "spec.assemblage.syncs: git.evil.example.com is not a source host of ours"
	if err := engine.SetUserPolicies(t.Context(), map[string]string{"hosts.rego": `package fleeet.hosts
deny contains "` + refusal + `" if {
	input.request.kind.kind == "ProxyAssemblage"
	some s in input.object.spec.assemblage.syncs
	contains(s.source.git.url, "git.evil.example.com")
}`}); err != nil {
		t.Fatal(err)
	}
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
		return plancontent.New(module, plancontent.Name(module, s), s)
	}
	// thin is the plan naming s's CompiledSync, plan the request writing it.
	thin := func(s *fleeetv1.NamedSync) *fleeetv1.ProxyAssemblage {
		pa := &fleeetv1.ProxyAssemblage{TypeMeta: metav1.TypeMeta{APIVersion: fleeetv1.GroupVersion.String(), Kind: "ProxyAssemblage"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "edge"}}
		pa.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{plancontent.Entry(s, plancontent.Name(module, s))}
		return pa
	}
	plan := func(s *fleeetv1.NamedSync) admission.Request {
		raw, err := json.Marshal(thin(s))
		if err != nil {
			t.Fatal(err)
		}
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Kind:      metav1.GroupVersionKind{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Kind: "ProxyAssemblage"},
			Resource:  metav1.GroupVersionResource{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Resource: "proxyassemblages"},
			Namespace: ns.Name, Name: "edge", Operation: admissionv1.Create,
			UserInfo: authenticationv1.UserInfo{Username: manager},
			Object:   runtime.RawExtension{Raw: raw},
		}}
	}
	// A limit between the plan's size as written and as resolved.
	thinSpec, err := json.Marshal(thin(good).Spec)
	if err != nil {
		t.Fatal(err)
	}
	resolved := thin(good)
	resolved.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{*good}
	wholeSpec, err := json.Marshal(resolved.Spec)
	if err != nil {
		t.Fatal(err)
	}
	between := (len(thinSpec) + len(wholeSpec)) / 2

	for name, tc := range map[string]struct {
		cached, live []client.Object
		request      admission.Request
		maxPlanBytes int
		// want is what the response says; "" means it is allowed.
		want []string
	}{
		"content read from the cache": {cached: []client.Object{content(good)}, request: plan(good)},
		"a refused host reached through the content": {cached: []client.Object{content(evil)}, request: plan(evil),
			want: []string{refusal}},
		"content only the apiserver holds yet": {live: []client.Object{content(evil)}, request: plan(evil),
			want: []string{refusal}},
		"the plan weighed with its content": {cached: []client.Object{content(good)}, request: plan(good),
			maxPlanBytes: between,
			want:         []string{fmt.Sprintf("spec: the plan of Remote edge is %d bytes, over the %d-byte limit", len(wholeSpec), between)}},
		"content that cannot be read": {request: plan(evil),
			want: []string{"could not be evaluated", "CompiledSync " + plancontent.Name(module, evil), "not found"}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			p := &Policies{Engine: engine, ManagerUsername: manager, MaxPlanBytes: cmp.Or(tc.maxPlanBytes, 512<<10),
				Reader:     fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(tc.cached, ns)...).Build(),
				LiveReader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(tc.live, ns)...).Build(),
				Timeout:    10 * time.Second}
			resp := p.Handle(t.Context(), tc.request)
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
