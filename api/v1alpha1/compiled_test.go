package v1alpha1_test

import (
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// A stamp of a generation and revision alone is written short, any other
// whole, and both read back as they were; a short form that is not
// <generation>/<revision> is an error, so the plan has no stamps.
func TestCompiledStampsRoundTrip(t *testing.T) {
	g := NewWithT(t)
	stamps := map[string]fleeetv1.Compiled{
		"app":     {Generation: 3, Revision: "0a1b2c3d4e"},
		"pending": {Generation: 4, Revision: "ffeeddccbb", Pending: true},
		"big":     {Generation: 1, TooLarge: "too large"},
	}
	raw, err := json.Marshal(stamps)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(raw)).To(ContainSubstring(`"app":"3/0a1b2c3d4e"`))
	g.Expect(string(raw)).To(ContainSubstring(`"pending":{"generation":4,"revision":"ffeeddccbb","pending":true}`))
	var back map[string]fleeetv1.Compiled
	g.Expect(json.Unmarshal(raw, &back)).To(Succeed())
	g.Expect(back).To(Equal(stamps))

	pa := &fleeetv1.ProxyAssemblage{}
	pa.Annotations = map[string]string{fleeetv1.CompiledAnnotation: `{"app":"three/0a1b"}`}
	g.Expect(pa.CompiledSyncs()).To(BeNil())
}
