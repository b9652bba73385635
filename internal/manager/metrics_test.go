package manager_test

import (
	"slices"
	"strings"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricFamilies is one scrape of a Prometheus metrics endpoint, parsed:
// the manager's, the apiserver's or etcd's.
type metricFamilies map[string]*dto.MetricFamily

// parseMetrics parses body, in Prometheus' text format.
func parseMetrics(g Gomega, body string) metricFamilies {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	return families
}

// sum adds up the samples of the counter or gauge name (or the sums of the
// histogram name) whose labels hold
// every one of labels, given as name, value pairs; found says whether any
// sample matched.
func (f metricFamilies) sum(name string, labels ...string) (sum float64, found bool) {
	family, ok := f[name]
	if !ok {
		return 0, false
	}
	for _, m := range family.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue() + m.GetHistogram().GetSampleSum()
		found = true
	}
	return sum, found
}

// hasLabels says whether m carries every name, value pair of labels.
func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == labels[i] && l.GetValue() == labels[i+1] }) {
			return false
		}
	}
	return true
}
