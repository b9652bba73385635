package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/policy"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// Flood settings: how many reviews tenant A keeps in flight, how many
// reviews tenant B sends one after the other (fewer when the flood makes
// them slower than floodFor allows).
const (
	floodClients = 16
	floodReviews = 300
	floodFor     = 20 * time.Second
	// floodAtLimit leaves room under the limit for the Module's other
	// fields.
	floodAtLimit = DefaultMaxObjectNodes - 200
)

// BenchmarkTenantFlood measures what one tenant's costly writes do to
// another tenant's admissions, from the raw body to the answer as the
// manager serves them (Guard, then controller-runtime's webhook, then the
// built-in policies), on this process's cores. Tenant B (team-b) sends
// ordinary Module creates one after the other, first alone, then while
// tenant A (team-a) keeps floodClients Module updates in flight, each
// carrying a large Helm values tree (and the managedFields the apiserver
// mirrors it in) in the object and the old object:
//
//	go test ./internal/webhooks/ -run '^$' -bench TenantFlood -benchtime 1x -timeout 30m
//
// Per flood it reports B's p50 and p99 alone and during the flood, A's CPU
// per review judged alone, and how many of A's reviews a second were
// answered during the flood, allowed or refused.
func BenchmarkTenantFlood(b *testing.B) {
	engine, err := policy.New(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	var namespaces []runtime.Object
	for _, ns := range []string{"team-a", "team-b"} {
		namespaces = append(namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels:      map[string]string{fleeetv1.TenantLabel: "true"},
			Annotations: map[string]string{"fleeet.dev/target-namespaces": "*"}}})
	}
	cache := fake.NewClientBuilder().WithRuntimeObjects(namespaces...).Build()
	ordinary := floodReview(b, "team-b", nil, nil)
	chart, chartMirror := chartValues(floodAtLimit)
	for _, flood := range []struct {
		name           string
		values, mirror []byte
	}{
		// The costliest values a tenant can store through the apiserver:
		// a list of about 700,000 zeros fills 1.4 MiB of the 1.5 MiB etcd
		// holds per object, and the apiserver mirrors a list as one field.
		{"dense-values=1.4MiB", []byte(`{"data":[0` + strings.Repeat(`,0`, 700_000) + `]}`), []byte(`{"f:data":{}}`)},
		// The largest chart-shaped values tree the default limit admits.
		{"chart-values=at-limit", chart, chartMirror},
	} {
		body := floodReview(b, "team-a", flood.values, flood.mirror)
		for _, guard := range floodGuards {
			b.Run(fmt.Sprintf("%s/a=%s", guard.name, flood.name), func(b *testing.B) {
				for b.Loop() {
					p := &Policies{Engine: engine, Reader: cache, LiveReader: cache, ManagerUsername: "system:serviceaccount:fleeet-system:fleet-manager",
						MaxPlanBytes: 512 << 10, Timeout: 3 * time.Second, Concurrency: 64}
					// Served over HTTP, as the manager serves it: each
					// request reaches its handler through the network poller
					// and waits for a core like any other goroutine.
					srv := httptest.NewServer(guard.handler(p))
					defer srv.Close()
					hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * floodClients}}
					send := func(body []byte) (time.Duration, *admissionv1.AdmissionResponse) {
						start := time.Now()
						resp, err := hc.Post(srv.URL+Path, "application/json", bytes.NewReader(body))
						if err != nil {
							b.Fatal(err)
						}
						data, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						took := time.Since(start)
						out := &admissionv1.AdmissionReview{}
						if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(data, out) != nil || out.Response == nil {
							b.Fatalf("HTTP %d: %.300s", resp.StatusCode, data)
						}
						return took, out.Response
					}
					// tenantB returns its reviews' latencies, sorted, and how
					// many were refused.
					tenantB := func(until time.Time) ([]time.Duration, int) {
						var took []time.Duration
						refused := 0
						for len(took) < floodReviews && (len(took) < 20 || time.Now().Before(until)) {
							d, resp := send(ordinary)
							if !resp.Allowed {
								if refused == 0 {
									b.Logf("tenant B's ordinary Module was refused after %s: %s", d, resp.Result.Message)
								}
								refused++
							}
							took = append(took, d)
						}
						slices.Sort(took)
						return took, refused
					}
					tenantB(time.Now().Add(floodFor)) // warm up
					goruntime.GC()                    // what an earlier flood left is not this one's
					stopAlone, peakAlone := make(chan struct{}), make(chan uint64)
					go func() { peakAlone <- peakHeap(stopAlone) }()
					alone, refusedAlone := tenantB(time.Now().Add(floodFor))
					close(stopAlone)
					b.ReportMetric(float64(<-peakAlone>>20), "peak-heap-alone-MiB")
					if refusedAlone > 0 {
						b.Fatal("tenant B's ordinary Module was refused with no flood")
					}

					goruntime.GC()
					stopA, peakA := make(chan struct{}), make(chan uint64)
					go func() { peakA <- peakHeap(stopA) }()
					cpu := cpuTime()
					const costly = 3
					allowedAlone := 0
					for range costly {
						if _, resp := send(body); resp.Allowed {
							allowedAlone++
						}
					}
					b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/1000/costly, "a-cpu-ms/review")
					close(stopA)
					b.ReportMetric(float64(<-peakA>>20), "a-alone-peak-heap-MiB")

					goruntime.GC()
					stop := make(chan struct{})
					var answered, allowed atomic.Int64
					var wg sync.WaitGroup
					for range floodClients {
						wg.Go(func() {
							for {
								select {
								case <-stop:
									return
								default:
								}
								_, resp := send(body)
								answered.Add(1)
								if resp.Allowed {
									allowed.Add(1)
								}
							}
						})
					}
					peak := make(chan uint64)
					go func() { peak <- peakHeap(stop) }()
					time.Sleep(time.Second) // let the flood build up
					start := time.Now()
					answered.Store(0)
					allowed.Store(0)
					flooded, refused := tenantB(time.Now().Add(floodFor))
					seconds := time.Since(start).Seconds()
					n, ok := answered.Load(), allowed.Load()
					close(stop)
					wg.Wait()
					b.ReportMetric(float64(<-peak>>20), "peak-heap-MiB")

					ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
					b.ReportMetric(ms(floodPercentile(alone, 50)), "b-alone-p50-ms")
					b.ReportMetric(ms(floodPercentile(alone, 99)), "b-alone-p99-ms")
					b.ReportMetric(ms(floodPercentile(flooded, 50)), "b-flood-p50-ms")
					b.ReportMetric(ms(floodPercentile(flooded, 99)), "b-flood-p99-ms")
					b.ReportMetric(float64(len(flooded)), "b-flood-reviews")
					b.ReportMetric(float64(refused), "b-flood-refused")
					b.ReportMetric(float64(ok)/seconds, "a-allowed/s")
					b.ReportMetric(float64(n-ok)/seconds, "a-refused/s")
					b.ReportMetric(float64(allowedAlone)/costly, "a-allowed-alone")
				}
			})
		}
	}
}

// floodGuards are the webhook's configurations the flood is measured
// against.
var floodGuards = []struct {
	name    string
	handler func(*Policies) http.Handler
}{
	// As before the node limit and the turns per namespace: a limit no
	// review reaches, and as many turns per namespace as slots overall.
	{"unlimited", func(p *Policies) http.Handler {
		p.MaxObjectNodes, p.NamespaceConcurrency = math.MaxInt/2, p.Concurrency
		return p.Guard(&admission.Webhook{Handler: p})
	}},
	// As the manager runs it.
	{"limited", func(p *Policies) http.Handler { return p.Guard(&admission.Webhook{Handler: p}) }},
}

// floodPercentile is the p-th percentile of sorted durations.
func floodPercentile(sorted []time.Duration, p int) time.Duration {
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// peakHeap samples the heap's live and not yet collected bytes until stop
// is closed, and returns the most it saw.
func peakHeap(stop <-chan struct{}) uint64 {
	var most uint64
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return most
		case <-tick.C:
			metrics.Read(sample)
			most = max(most, sample[0].Value.Uint64())
		}
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// floodReview is an AdmissionReview from user alice in namespace ns: a
// Module create without values, otherwise an update of a Helm Module with
// values in the object and in the old object, each with the managedFields
// entry, mirror, the apiserver writes for them.
func floodReview(tb testing.TB, ns string, values, mirror []byte) []byte {
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
	m.APIVersion, m.Kind = fleeetv1.GroupVersion.String(), "Module"
	m.Namespace, m.Name = ns, "web"
	m.Spec.Sync.Package.Kustomize.TargetNamespace = ns
	op := admissionv1.Create
	if values != nil {
		op = admissionv1.Update
		m.Spec.Sync.Source = fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "web", Version: "1.0.0"}}
		m.Spec.Sync.Package = fleeetv1.Package{Helm: &fleeetv1.HelmPackage{ReleaseName: "web", TargetNamespace: ns, Values: &apiextensionsv1.JSON{Raw: values}}}
		m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: m.APIVersion,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:sync":{"f:package":{"f:helm":{"f:values":` + string(mirror) + `}}}}}`)}}}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	req := &admissionv1.AdmissionRequest{UID: "1",
		Kind:      metav1.GroupVersionKind{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Kind: "Module"},
		Resource:  metav1.GroupVersionResource{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Resource: "modules"},
		Namespace: ns, Name: m.Name, Operation: op,
		UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}},
		Object:   runtime.RawExtension{Raw: raw},
	}
	if op == admissionv1.Update {
		req.OldObject = runtime.RawExtension{Raw: raw}
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// chartValues is a Helm values tree of about nodes JSON nodes shaped like
// a chart's (components, each with an image, resources, a few settings),
// and its managedFields mirror: one f: key per field, {} for each leaf.
func chartValues(nodes int) (values, mirror []byte) {
	const component = `{"enabled":true,"replicas":2,"image":{"repository":"registry.example.com/team/c%[1]d","tag":"1.%[1]d.0","pullPolicy":"IfNotPresent"},` +
		`"resources":{"requests":{"cpu":"100m","memory":"128Mi"},"limits":{"memory":"256Mi"}},"service":{"type":"ClusterIP","port":8080},"nodeSelector":{},"tolerations":[]}`
	const componentMirror = `{"f:enabled":{},"f:replicas":{},"f:image":{"f:repository":{},"f:tag":{},"f:pullPolicy":{}},` +
		`"f:resources":{"f:requests":{"f:cpu":{},"f:memory":{}},"f:limits":{"f:memory":{}}},"f:service":{"f:type":{},"f:port":{}},"f:nodeSelector":{},"f:tolerations":{}}`
	const perComponent = 18 // JSON nodes in component, and in componentMirror
	var v, m strings.Builder
	v.WriteString("{")
	m.WriteString("{")
	for i := range max(1, nodes/perComponent) {
		if i > 0 {
			v.WriteString(",")
			m.WriteString(",")
		}
		fmt.Fprintf(&v, `"c%d":`+component, i)
		fmt.Fprintf(&m, `"f:c%d":`+componentMirror, i)
	}
	v.WriteString("}")
	m.WriteString("}")
	return []byte(v.String()), []byte(m.String())
}
