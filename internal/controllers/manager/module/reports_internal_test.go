package module

import (
	"testing"

	. "github.com/onsi/gomega"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Only the syncs whose report changed, came or went are named, so one
// cluster's report of one sync reconciles one Module.
func TestChangedReportsNamesOnlyTheSyncsThatChanged(t *testing.T) {
	g := NewWithT(t)
	before := []fleeetv1.SyncStatus{
		{Name: "same", State: fleeetv1.SyncReady}, {Name: "moved", State: fleeetv1.SyncProgressing}, {Name: "gone", State: fleeetv1.SyncReady},
	}
	after := []fleeetv1.SyncStatus{
		{Name: "same", State: fleeetv1.SyncReady}, {Name: "moved", State: fleeetv1.SyncReady}, {Name: "new", State: fleeetv1.SyncBlocked},
	}
	g.Expect(changedReports(before, after)).To(ConsistOf("moved", "new", "gone"))
	g.Expect(changedReports(after, after)).To(BeEmpty())
}
