package webhooks

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
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
			got, err := tooDeep([]byte(tc.doc), tc.limit)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestTooDeepReportsMalformedJSON(t *testing.T) {
	_, err := tooDeep([]byte(`{"a":`), 4)
	NewWithT(t).Expect(err).To(HaveOccurred())
}
