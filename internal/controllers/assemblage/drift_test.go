package assemblage

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// A drift detected moments ago whose correction is not reported yet is read
// again soon: helm-controller records the correction's event after the
// status change that woke the agent. Drift left in place (Warn mode, a
// failed correction), drift already corrected and drift long past are not.
func TestOnlyARecentUncorrectedDriftIsReadAgain(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *metav1.Time { at := metav1.NewTime(now.Add(-d)); return &at }
	cases := []struct {
		name  string
		drift *fleeetv1.SyncDrift
		want  bool
	}{
		{"no drift", nil, false},
		{"correction pending", &fleeetv1.SyncDrift{Detected: 1, LastDetected: ago(2 * time.Second)}, true},
		{"corrected", &fleeetv1.SyncDrift{Detected: 1, Corrected: 1, LastDetected: ago(2 * time.Second)}, false},
		{"left in place", &fleeetv1.SyncDrift{Detected: 1, Drifted: true, LastDetected: ago(2 * time.Second)}, false},
		{"long past", &fleeetv1.SyncDrift{Detected: 2, Corrected: 1, LastDetected: ago(time.Hour)}, false},
	}
	for _, tc := range cases {
		NewWithT(t).Expect(correctionPending(tc.drift, now)).To(Equal(tc.want), tc.name)
	}
}
