package compile

import (
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// The bound that spares fit its exact measure must never be below it,
// whatever numbers and escapes a tenant's helm values hold: a plan taken
// for within its limit by the bound would otherwise be refused whole.
func TestPlanBytesBoundIsNeverBelowPlanBytes(t *testing.T) {
	for _, values := range []string{
		`{}`,
		`{"n":1234567,"tiny":0.000012,"huge":12345678901234567890,"neg":-3.50,"exp":3e21,"list":[1,2.0,1e-300]}`,
		`{"max":1.7976931348623157e308,"min":-2.2250738585072014e-308,"many":[1234567,2345678,3456789,4567890]}`,
		`{"escaped":"\u00e9\u0041\/","html":"<a href=\"x\">&amp;</a>","sep":"\u2028","text":"grüße €"}`,
		`{ "spaced" : [ 1 , 2 ] , "dup":1,"dup":22222222}`,
	} {
		spec := fleeetv1.ProxyAssemblageSpec{Assemblage: fleeetv1.AssemblageSpec{Syncs: []fleeetv1.NamedSync{{Name: "app",
			SyncSpec: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: "https://charts.example.com", Chart: "app", Version: "1.2.3"}},
				Package: fleeetv1.Package{Helm: &fleeetv1.HelmPackage{Values: &apiextensionsv1.JSON{Raw: []byte(values)}}},
			}}}}}
		NewWithT(t).Expect(planBytesBound(&spec)).To(BeNumerically(">=", PlanBytes(&spec)), values)
	}
}
