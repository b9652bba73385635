package flux

import (
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func cond(typ string, status metav1.ConditionStatus, reason string, gen int64) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, ObservedGeneration: gen, Message: typ + " " + reason}
}

func TestComputeKstatusReadsFluxConditions(t *testing.T) {
	const T, F = metav1.ConditionTrue, metav1.ConditionFalse
	cases := []struct {
		name               string
		generation, status int64
		conds              []metav1.Condition
		want               kstatus
	}{
		{"fresh object", 1, -1, nil, inProgress},
		{"ready at current generation", 2, 2, []metav1.Condition{cond("Ready", T, "Succeeded", 2)}, current},
		{"ready at an older generation", 2, 1, []metav1.Condition{cond("Ready", T, "Succeeded", 1)}, inProgress},
		{"reconciling", 2, 2, []metav1.Condition{cond("Reconciling", T, "Progressing", 2), cond("Ready", "Unknown", "Progressing", 2)}, inProgress},
		{"failing and retrying, never succeeded", 1, -1, []metav1.Condition{
			cond("Reconciling", T, "ProgressingWithRetry", 1), cond("Ready", F, "ArtifactFailed", 1)}, failed},
		{"failed at an older generation", 2, 1, []metav1.Condition{cond("Ready", F, "BuildFailed", 1)}, inProgress},
		{"stalled", 1, 1, []metav1.Condition{cond("Stalled", T, "RetriesExceeded", 1), cond("Ready", F, "InstallFailed", 1)}, failed},
		{"ready unknown", 1, 1, []metav1.Condition{cond("Ready", "Unknown", "Progressing", 1)}, inProgress},
	}
	for _, tc := range cases {
		got, _ := computeKstatus(tc.generation, tc.status, tc.conds)
		NewWithT(t).Expect(got).To(Equal(tc.want), tc.name)
	}
}

func TestAStalledObjectSaysWhatFailed(t *testing.T) {
	g := NewWithT(t)
	_, msg := computeKstatus(1, 1, []metav1.Condition{cond("Stalled", metav1.ConditionTrue, "RetriesExceeded", 1), cond("Ready", metav1.ConditionFalse, "UpgradeFailed", 1)})
	g.Expect(msg).To(Equal("Stalled RetriesExceeded: Ready UpgradeFailed"))
	_, msg = computeKstatus(1, 1, []metav1.Condition{cond("Stalled", metav1.ConditionTrue, "RetriesExceeded", 1)})
	g.Expect(msg).To(Equal("Stalled RetriesExceeded"))
}

func TestARetryingHelmReleaseSaysWhyItsLastAttemptFailed(t *testing.T) {
	g := NewWithT(t)
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	hr.Status.ObservedGeneration = 1
	hr.Status.Conditions = []metav1.Condition{
		cond("Reconciling", metav1.ConditionTrue, "Progressing", 2),
		cond("Ready", metav1.ConditionUnknown, "Progressing", 2),
		cond("Released", metav1.ConditionFalse, "InstallFailed", 2),
	}
	v := Judge(Objects{Applier: hr}, Revision{ChartVersion: "1.0.0"})
	g.Expect(v.State).To(Equal(fleeetv1.SyncProgressing), "Flux is still retrying")
	g.Expect(v.Message).To(Equal("waiting for Flux to observe generation 2; the last attempt failed: Released InstallFailed"))

	// A failure of an earlier generation says nothing about this one.
	hr.Status.Conditions[2].ObservedGeneration = 1
	v = Judge(Objects{Applier: hr}, Revision{ChartVersion: "1.0.0"})
	g.Expect(v.Message).To(Equal("waiting for Flux to observe generation 2"))
}

// Remediation rolls a failed upgrade back and leaves Ready saying only that
// the rollback succeeded: the failure still names what broke the upgrade.
func TestARolledBackHelmReleaseSaysWhyItsUpgradeFailed(t *testing.T) {
	g := NewWithT(t)
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	hr.Status.ObservedGeneration = 2
	hr.Status.Conditions = []metav1.Condition{
		cond("Stalled", metav1.ConditionTrue, "RetriesExceeded", 2),
		cond("Ready", metav1.ConditionFalse, "RollbackSucceeded", 2),
		cond("Released", metav1.ConditionFalse, "UpgradeFailed", 2),
	}
	v := Judge(Objects{Applier: hr}, Revision{ChartVersion: "1.0.0"})
	g.Expect(v.State).To(Equal(fleeetv1.SyncFailed))
	g.Expect(v.Message).To(Equal("Stalled RetriesExceeded: Ready RollbackSucceeded; the last attempt failed: Released UpgradeFailed"))
}

// A Kustomization whose source has not fetched yet says "Source artifact not
// found" with Ready=False: that is waiting while the source is in progress,
// and a failure once the source is Ready without giving it an artifact.
func TestAKustomizationWaitingForItsFirstArtifactIsProgressing(t *testing.T) {
	g := NewWithT(t)
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	ks.Status.ObservedGeneration = 1
	ks.Status.Conditions = []metav1.Condition{cond("Ready", metav1.ConditionFalse, "ArtifactFailed", 1)}
	fetching := &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Generation: 1}}

	v := Judge(Objects{Source: fetching, Applier: ks}, Revision{})
	g.Expect(v.State).To(Equal(fleeetv1.SyncProgressing))
	g.Expect(v.Message).To(Equal("waiting for the source: Ready ArtifactFailed"))

	fetched := fetching.DeepCopy()
	fetched.Status.ObservedGeneration = 1
	fetched.Status.Conditions = []metav1.Condition{cond("Ready", metav1.ConditionTrue, "Succeeded", 1)}
	g.Expect(Judge(Objects{Source: fetched, Applier: ks}, Revision{}).State).To(Equal(fleeetv1.SyncFailed))
}

func TestASyncStaysReadyWhileFluxReChecksItAndOnlyThen(t *testing.T) {
	const T, F, U = metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown
	const applied = "v1.0.0@sha1:0123"
	ready := fleeetv1.SyncStatus{Name: "app", State: fleeetv1.SyncReady, Revision: applied, Message: "Applied revision: " + applied}
	kustomization := func(generation, observed int64, conds ...metav1.Condition) Objects {
		ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Generation: generation}}
		ks.Status.ObservedGeneration, ks.Status.Conditions, ks.Status.LastAppliedRevision = observed, conds, applied
		return Objects{Applier: ks}
	}
	helmRelease := func(conds ...metav1.Condition) Objects {
		hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
		hr.Status.ObservedGeneration, hr.Status.Conditions = 1, conds
		return Objects{Applier: hr}
	}
	// A HelmRelease without history has applied no revision.
	readyHelm := fleeetv1.SyncStatus{Name: "app", State: fleeetv1.SyncReady, Message: "Helm upgrade succeeded"}
	recheck := []metav1.Condition{cond("Reconciling", T, "Progressing", 1), cond("Ready", U, "Progressing", 1)}
	cases := []struct {
		name string
		o    Objects
		last fleeetv1.SyncStatus
		want fleeetv1.SyncState
	}{
		{"a Kustomization re-applied at its interval", kustomization(1, 1, recheck...), ready, fleeetv1.SyncReady},
		{"a HelmRelease re-checked at its interval", helmRelease(cond("Reconciling", T, "Progressing", 1), cond("Ready", T, "Succeeded", 1)), readyHelm, fleeetv1.SyncReady},
		{"a new spec not observed yet", kustomization(2, 1, recheck...), ready, fleeetv1.SyncProgressing},
		{"a retry after a failure", kustomization(1, 1, cond("Reconciling", T, "ProgressingWithRetry", 1), cond("Ready", U, "Progressing", 1)), ready, fleeetv1.SyncProgressing},
		{"a re-check Flux found failing", kustomization(1, 1, cond("Reconciling", T, "Progressing", 1), cond("Ready", F, "HealthCheckFailed", 1)), ready, fleeetv1.SyncProgressing},
		{"a sync last reported failing", kustomization(1, 1, recheck...), fleeetv1.SyncStatus{Name: "app", State: fleeetv1.SyncFailed, Revision: applied}, fleeetv1.SyncProgressing},
		{"a sync last reported Ready at another revision", kustomization(1, 1, recheck...), fleeetv1.SyncStatus{Name: "app", State: fleeetv1.SyncReady, Revision: "v0.9.0@sha1:4567"}, fleeetv1.SyncProgressing},
		{"a sync never reported", kustomization(1, 1, recheck...), fleeetv1.SyncStatus{}, fleeetv1.SyncProgressing},
	}
	for _, tc := range cases {
		got := KeepReadyThroughRecheck(Judge(tc.o, Revision{GitTag: "v1.0.0"}), tc.o, tc.last)
		NewWithT(t).Expect(got.State).To(Equal(tc.want), tc.name)
		if tc.want == fleeetv1.SyncReady {
			NewWithT(t).Expect(got.Message).To(Equal(tc.last.Message), tc.name)
		}
	}
}
