package flux

import (
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Drift is read from helm-controller's events on the HelmRelease itself:
// detections and corrections are counted with their repeats, the objects of
// the latest detection are named, and nothing else of an event is
// reported. Another HelmRelease's events, one that does not detect drift,
// and a release without drift report nothing.
func TestDriftIsCountedFromHelmControllerEvents(t *testing.T) {
	g := NewWithT(t)
	at := func(min int) metav1.Time { return metav1.NewTime(time.Date(2026, 11, 25, 12, min, 0, 0, time.UTC)) }
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", UID: "uid-web"},
		Spec: helmv2.HelmReleaseSpec{DriftDetection: &helmv2.DriftDetection{Mode: helmv2.DriftDetectionEnabled}}}
	event := func(name string, uid types.UID, reason string, count int32, last metav1.Time, msg string) client.Object {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
			InvolvedObject: corev1.ObjectReference{UID: uid, Kind: "HelmRelease", Name: "web"},
			Reason:         reason, Count: count, LastTimestamp: last, Message: msg}
	}
	secretValue := "hunter2"
	events := []client.Object{
		event("old", "uid-web", helmv2.DriftDetectedReason, 2, at(1),
			"Cluster state of release team-a/web.v1 has drifted from the desired state:\nSecret/team-a/old changed (0 additions, 1 changes, 0 removals)"),
		event("new", "uid-web", helmv2.DriftDetectedReason, 1, at(5),
			"Cluster state of release team-a/web.v1 has drifted from the desired state:\nDeployment/team-a/web changed (0 additions, 1 changes, 0 removals)\nService/team-a/web removed\nvalue "+secretValue+" changed"),
		event("fixed", "uid-web", "DriftCorrected", 3, at(5), "Cluster state of release team-a/web.v1 has been corrected:\nDeployment/team-a/web configured"),
		event("other", "uid-db", helmv2.DriftDetectedReason, 7, at(9), "Cluster state of release team-a/db.v1 has drifted from the desired state:\nDeployment/team-a/db changed"),
		event("upgraded", "uid-web", helmv2.UpgradeSucceededReason, 1, at(6), "Helm upgrade succeeded"),
	}
	scheme := runtime.NewScheme()
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(events...).
		WithIndex(&corev1.Event{}, "involvedObject.uid", func(o client.Object) []string {
			return []string{string(o.(*corev1.Event).InvolvedObject.UID)}
		}).Build()

	d, err := ReadDrift(t.Context(), reader, hr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.LastDetected.Time).To(BeTemporally("==", at(5).Time))
	d.LastDetected = nil
	g.Expect(d).To(Equal(&fleeetv1.SyncDrift{Detected: 3, Corrected: 3,
		Objects: []string{"Deployment/team-a/web", "Service/team-a/web"}}))
	g.Expect(d.Summary()).NotTo(ContainSubstring(secretValue))

	hr.Status.Conditions = []metav1.Condition{{Type: helmv2.DriftedCondition, Status: metav1.ConditionTrue}}
	d, err = ReadDrift(t.Context(), reader, hr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Drifted).To(BeTrue(), "the Drifted condition says drift is in place now")

	off := hr.DeepCopy()
	off.Spec.DriftDetection.Mode = helmv2.DriftDetectionDisabled
	g.Expect(ReadDrift(t.Context(), reader, off)).To(BeNil(), "a release that detects no drift reports none")
	g.Expect(DriftMark(off)).To(BeEmpty())

	clean := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "team-a", UID: "uid-api"},
		Spec: helmv2.HelmReleaseSpec{DriftDetection: &helmv2.DriftDetection{Mode: helmv2.DriftDetectionWarn}}}
	g.Expect(ReadDrift(t.Context(), reader, clean)).To(BeNil(), "no drift event, no drift")
}

// The mark moves when helm-controller finds drift and when drift is gone
// again, and stays while its Drifted condition does.
func TestTheDriftMarkMovesWithTheDriftedCondition(t *testing.T) {
	g := NewWithT(t)
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", UID: "uid-web"},
		Spec: helmv2.HelmReleaseSpec{DriftDetection: &helmv2.DriftDetection{Mode: helmv2.DriftDetectionEnabled}}}
	drifted := func(status metav1.ConditionStatus, minute int) string {
		hr.Status.Conditions = []metav1.Condition{{Type: helmv2.DriftedCondition, Status: status,
			LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 25, 12, minute, 0, 0, time.UTC))}}
		return DriftMark(hr)
	}
	installed := drifted(metav1.ConditionFalse, 0)
	g.Expect(installed).NotTo(BeEmpty())
	g.Expect(drifted(metav1.ConditionFalse, 0)).To(Equal(installed), "an upgrade leaves the condition, and the mark, as they were")
	g.Expect(drifted(metav1.ConditionTrue, 5)).NotTo(Equal(installed), "drift found")
	g.Expect(drifted(metav1.ConditionFalse, 5)).NotTo(Equal(installed), "drift corrected")
}
