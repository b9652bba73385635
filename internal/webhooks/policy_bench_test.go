package webhooks

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/policy"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// BenchmarkJudgeModule is the handler's own work for one Module create, the
// request BenchmarkAdmission in internal/manager sends: namespace look-up
// (from a cache), input, evaluation of every policy. Per-request CPU and
// allocations without TLS, the apiserver or other processes:
//
//	go test ./internal/webhooks/ -run '^$' -bench JudgeModule -benchmem
func BenchmarkJudgeModule(b *testing.B) {
	engine, err := policy.New(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a",
		Labels:      map[string]string{fleeetv1.TenantLabel: "true"},
		Annotations: map[string]string{"fleeet.dev/target-namespaces": "*"}}}
	cache := fake.NewClientBuilder().WithObjects(ns).Build()
	p := &Policies{Engine: engine, Reader: cache, LiveReader: cache, ManagerUsername: "system:serviceaccount:fleeet-system:fleet-manager",
		MaxPlanBytes: 512 << 10, Timeout: time.Second, Concurrency: 1}
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
	m.Namespace, m.Name = ns.Name, "web"
	m.Spec.Sync.Package.Kustomize.TargetNamespace = ns.Name
	m.APIVersion, m.Kind = fleeetv1.GroupVersion.String(), "Module"
	raw, err := json.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Kind:      metav1.GroupVersionKind{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Kind: "Module"},
		Resource:  metav1.GroupVersionResource{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Resource: "modules"},
		Namespace: ns.Name, Name: m.Name, Operation: admissionv1.Create,
		UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}},
		Object:   runtime.RawExtension{Raw: raw},
	}}
	for b.Loop() {
		if resp := p.Handle(context.Background(), req); !resp.Allowed {
			b.Fatalf("the Module was refused: %v", resp.Result)
		}
	}
}
