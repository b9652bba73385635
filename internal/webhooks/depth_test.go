package webhooks

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func TestTooDeepNamesThePathWhereTheLimitIsCrossed(t *testing.T) {
	nested := func(n int) string {
		return `{"spec":{"values":` + strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n) + `}}`
	}
	for _, tc := range []struct {
		name, doc string
		limit     int
		want      string
	}{
		{"flat object", `{"a":1,"b":"x"}`, 2, ""},
		{"exactly at the limit", nested(2), 4, ""},
		{"one level over", nested(3), 4, "spec.values.a.a"},
		{"arrays count as levels", `{"spec":{"list":[1,[2,[3]]]}}`, 3, "spec.list[1]"},
		{"index of the deep element", `{"s":[{"x":1},{"y":{"z":{}}}]}`, 3, "s[1].y"},
		{"keys after a closed container", `{"a":{"b":{}},"c":{"d":{"e":{}}}}`, 3, "c.d.e"},
		{"strings holding brackets are not levels", `{"a":"{{{[[["}`, 1, ""},
		{"empty body (a DELETE)", ``, 1, ""},
		{"managedFields are the apiserver's, not judged", `{"metadata":{"managedFields":[{"fieldsV1":{"f:spec":{"f:a":{}}}}],"name":"x"},"spec":{"a":1}}`, 3, ""},
		{"keys after managedFields are judged", `{"metadata":{"managedFields":[],"labels":{"a":{}}}}`, 2, "metadata.labels"},
		{"9000 deep", nested(9000), 64, "spec.values" + strings.Repeat(".a", 62)},
		{"deep managedFields name the deep field they mirror", `{"metadata":{"managedFields":[{"fieldsV1":` + strings.Repeat(`{"f:a":`, 200) + `{}` + strings.Repeat(`}`, 200) + `}]},` + nested(200)[1:], 64, "spec.values" + strings.Repeat(".a", 62)},
		{"deep managedFields alone are named", `{"metadata":{"managedFields":[{"fieldsV1":` + strings.Repeat(`{"f:a":`, 200) + `{}` + strings.Repeat(`}`, 200) + `}]}}`, 64, "metadata.managedFields[0].fieldsV1" + strings.Repeat(".f:a", 124)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := checkObject([]byte(tc.doc), limits{depth: tc.limit})
			g.Expect(err).NotTo(HaveOccurred())
			if tc.want == "" {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.path).To(Equal(tc.want))
			g.Expect(got.nodes).To(BeZero())
		})
	}
}

func TestTooDeepReportsMalformedJSON(t *testing.T) {
	_, err := checkObject([]byte(`{"a":`), limits{depth: 4})
	NewWithT(t).Expect(err).To(HaveOccurred())
}

// Every value counts once, keys do not: an object's nodes are what decoding
// and judging it cost. A refusal names the deepest field holding more than
// half of the limit, the one to make smaller, and managedFields, which the
// apiserver writes, have room of their own and are named only when no field
// the user wrote is over.
func TestCheckObjectCountsNodesAndNamesTheFieldHoldingMost(t *testing.T) {
	list := func(n int) string { return "[" + strings.Repeat("0,", n-1) + "0]" }
	mirror := func(n int) string {
		return `"managedFields":[{"manager":"kubectl","fieldsV1":{"f:spec":{"f:values":{"f:big":` + list(n) + `}}}}]`
	}
	for _, tc := range []struct {
		name, doc string
		limit     int
		refused   bool
		want      string // the path refused
		managed   bool
	}{
		{"every kind of value once", `{"a":{"b":[1,-2.5e3,true,false,null,"s"]}}`, 8, false, "", false},
		{"one over", `{"a":{"b":[1,-2.5e3,true,false,null,"s"]}}`, 7, true, "a.b", false},
		{"keys are not nodes", `{"a":1,"b":2,"c":3}`, 3, false, "", false},
		{"a string holding JSON is one node", `{"a":"[1,2,{\"x\":[3,4]}]"}`, 1, false, "", false},
		{"spaces do not split a value", `{"a": [ 1 , 2 ,3 ] }`, 4, false, "", false},
		{"the big field, not its last element", `{"metadata":{"name":"x"},"spec":{"small":[1,2],"values":{"big":` + list(100) + `}}}`, 50, true, "spec.values.big", false},
		{"the field holding most, not a small part of it", `{"spec":{"values":{"a":[1,2,3,4,5,6],"b":[1,2,3,4,5,6]}}}`, 12, true, "spec.values", false},
		{"many top-level fields", `{"a":1,"b":2,"c":3,"d":4}`, 3, true, "", false},
		{"managedFields have room of their own", `{"metadata":{` + mirror(10) + `},"spec":{"a":[1,2]}}`, 10, false, "", false},
		{"managedFields over their own room", `{"metadata":{` + mirror(40) + `},"spec":{"a":[1,2]}}`, 10, true, "metadata.managedFields[0].fieldsV1.f:spec.f:values.f:big", true},
		{"the written field, not its mirror", `{"metadata":{` + mirror(40) + `},"spec":{"values":{"big":` + list(40) + `}}}`, 10, true, "spec.values.big", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := checkObject([]byte(tc.doc), limits{depth: maxDepth, nodes: tc.limit})
			g.Expect(err).NotTo(HaveOccurred())
			if !tc.refused {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.path).To(Equal(tc.want))
			g.Expect(got.managed).To(Equal(tc.managed))
			g.Expect(got.nodes).To(Equal(map[bool]int{false: tc.limit, true: managedFieldsNodes(tc.limit)}[tc.managed]))
		})
	}
}

// A refusal names the field and the limit, says what to do, and never
// repeats what the field holds.
func TestNodeRefusalNamesTheFieldAndTheLimitNotTheData(t *testing.T) {
	g := NewWithT(t)
	doc := `{"spec":{"values":{"secret":["hunter2"` + strings.Repeat(`,"hunter2"`, 100) + `]}}}`
	got, err := checkObject([]byte(doc), limits{depth: maxDepth, nodes: 50})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).NotTo(BeNil())
	msg := got.refusal()
	g.Expect(msg).To(HavePrefix("spec.values.secret: the object holds more than 50 JSON nodes"))
	g.Expect(msg).To(ContainSubstring("--max-object-nodes"))
	g.Expect(msg).NotTo(ContainSubstring("hunter2"))

	got.stored = true
	g.Expect(got.refusal()).To(ContainSubstring("the object as stored"))
	g.Expect(got.refusal()).To(ContainSubstring("delete it and create it again"))
}

// Handle refuses, before evaluating anything, an object or an old object
// holding more nodes than the limit, as Guard does for the webhook; plans
// and CompiledSyncs, compiled by the manager, have the plan size limit
// more.
func TestHandleRefusesObjectsHoldingTooManyNodes(t *testing.T) {
	g := NewWithT(t)
	p := &Policies{Reader: fake.NewClientBuilder().Build(), LiveReader: fake.NewClientBuilder().Build(), Timeout: time.Second,
		MaxObjectNodes: 100, MaxPlanBytes: 1000}
	big := []byte(`{"metadata":{"name":"m"},"spec":{"values":[0` + strings.Repeat(",0", 200) + `]}}`)
	small := []byte(`{"metadata":{"name":"m"},"spec":{}}`)
	request := func(kind string, obj, old []byte) admission.Request {
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Kind: metav1.GroupVersionKind{Group: "fleeet.dev", Version: "v1alpha1", Kind: kind}, Operation: admissionv1.Update, Namespace: "nowhere",
			Object: runtime.RawExtension{Raw: obj}, OldObject: runtime.RawExtension{Raw: old}}}
	}

	resp := p.Handle(context.Background(), request("Module", big, small))
	g.Expect(resp.Allowed).To(BeFalse())
	g.Expect(resp.Result.Message).To(HavePrefix("spec.values: the object holds more than 100 JSON nodes"))

	resp = p.Handle(context.Background(), request("Module", small, big))
	g.Expect(resp.Allowed).To(BeFalse())
	g.Expect(resp.Result.Message).To(HavePrefix("spec.values: the object as stored (the update's old object) holds more than 100 JSON nodes"))

	// The plan gets past the limit, to the namespace look-up, which fails
	// here.
	resp = p.Handle(context.Background(), request("ProxyAssemblage", big, big))
	g.Expect(resp.Result.Message).NotTo(ContainSubstring("JSON nodes"))
	g.Expect(resp.Result.Message).To(ContainSubstring("namespace"))
}
