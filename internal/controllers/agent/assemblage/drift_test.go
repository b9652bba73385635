package assemblage

import (
	"context"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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

// countingReader counts the lists it serves.
type countingReader struct {
	client.Reader
	lists int
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.lists++
	return c.Reader.List(ctx, list, opts...)
}

// A HelmRelease's events are listed again only when its Drifted condition
// moved, or while a detected drift's correction is still to be reported;
// otherwise what was read before stands.
func TestDriftIsReadAgainOnlyWhenItMayHaveChanged(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	scheme := runtime.NewScheme()
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	detected := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "detected", Namespace: "team-a"},
		InvolvedObject: corev1.ObjectReference{UID: "uid-web"}, Reason: helmv2.DriftDetectedReason, Count: 1,
		LastTimestamp: metav1.NewTime(now.Add(-2 * time.Second)), Message: "drifted:\nDeployment/team-a/web changed (0 additions, 1 changes, 0 removals)"}
	store := fake.NewClientBuilder().WithScheme(scheme).WithObjects(detected).
		WithIndex(&corev1.Event{}, "involvedObject.uid", func(o client.Object) []string {
			return []string{string(o.(*corev1.Event).InvolvedObject.UID)}
		}).Build()
	events := &countingReader{Reader: store}
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", UID: "uid-web"},
		Spec: helmv2.HelmReleaseSpec{DriftDetection: &helmv2.DriftDetection{Mode: helmv2.DriftDetectionEnabled}},
		Status: helmv2.HelmReleaseStatus{Conditions: []metav1.Condition{{Type: helmv2.DriftedCondition,
			Status: metav1.ConditionFalse, LastTransitionTime: metav1.NewTime(now.Add(-time.Second))}}}}
	var d driftReads

	g.Expect(d.read(t.Context(), events, hr, now)).To(HaveField("Detected", int32(1)))
	g.Expect(d.read(t.Context(), events, hr, now)).To(HaveField("Corrected", int32(0)))
	g.Expect(events.lists).To(Equal(2), "a correction still to be reported is looked for")

	g.Expect(store.Create(t.Context(), &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "corrected", Namespace: "team-a"},
		InvolvedObject: corev1.ObjectReference{UID: "uid-web"}, Reason: "DriftCorrected", Count: 1})).To(Succeed())
	g.Expect(d.read(t.Context(), events, hr, now)).To(HaveField("Corrected", int32(1)))
	g.Expect(d.read(t.Context(), events, hr, now)).To(HaveField("Corrected", int32(1)))
	g.Expect(events.lists).To(Equal(3), "nothing moved since the correction was read")

	hr.Status.Conditions[0].Status = metav1.ConditionTrue
	g.Expect(d.read(t.Context(), events, hr, now)).To(HaveField("Drifted", true))
	g.Expect(events.lists).To(Equal(4), "the Drifted condition moved")

	d.forget(client.ObjectKeyFromObject(hr))
	g.Expect(d.last).To(BeEmpty())
}
