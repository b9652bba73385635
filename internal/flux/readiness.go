package flux

import (
	"fmt"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// kstatus is the kstatus verdict on one Flux object.
type kstatus int

const (
	inProgress kstatus = iota
	current
	failed
)

// computeKstatus applies the kstatus rules to a Flux object's generation and
// conditions: Stalled or Ready=False is failed, not yet observed or
// Reconciling is in progress, Ready=True is current. Flux keeps
// Reconciling=True with reason ProgressingWithRetry while it retries a
// failure, and leaves status.observedGeneration behind until a success; the
// Ready condition's own observedGeneration says the failure is about the
// current generation, and only a change of spec or source will fix it.
func computeKstatus(generation, observed int64, conds []metav1.Condition) (kstatus, string) {
	ready := apimeta.FindStatusCondition(conds, fleeetv1.ReadyCondition)
	reconciling := apimeta.FindStatusCondition(conds, fleeetv1.ReconcilingCondition)
	retrying := reconciling != nil && reconciling.Reason == meta.ProgressingWithRetryReason
	readyFalse := ready != nil && ready.Status == metav1.ConditionFalse && ready.ObservedGeneration == generation
	if c := apimeta.FindStatusCondition(conds, fleeetv1.StalledCondition); c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == generation {
		// Stalled says that Flux gave up ("Failed to upgrade after 1
		// attempt(s)"); Ready=False says what went wrong.
		if readyFalse && ready.Message != "" {
			return failed, c.Message + ": " + ready.Message
		}
		return failed, c.Message
	}
	if readyFalse && (reconciling == nil || reconciling.Status != metav1.ConditionTrue || retrying) {
		return failed, ready.Message
	}
	if observed != generation {
		return inProgress, fmt.Sprintf("waiting for Flux to observe generation %d", generation)
	}
	switch {
	case reconciling != nil && reconciling.Status == metav1.ConditionTrue:
		return inProgress, reconciling.Message
	case ready == nil:
		return inProgress, "waiting for Flux to report readiness"
	case ready.Status == metav1.ConditionTrue:
		return current, ready.Message
	default:
		return inProgress, ready.Message
	}
}

// Objects is what a cluster holds for one sync.
type Objects struct {
	// Source is the GitRepository or HelmRepository, if any.
	Source client.Object
	// Applier is the Kustomization or HelmRelease, if any.
	Applier client.Object
}

// Exists reports whether the sync's applier is in the cluster.
func (o Objects) Exists() bool { return o.Applier != nil }

// SpecHash is the hash of the spec last applied to the applier.
func (o Objects) SpecHash() string {
	if o.Applier == nil {
		return ""
	}
	return o.Applier.GetAnnotations()[fleeetv1.SpecHashAnnotation]
}

// Verdict is the readiness of a sync's Flux objects against a revision.
type Verdict struct {
	State    fleeetv1.SyncState
	Revision string
	Message  string
}

// Ready reports whether the sync is kstatus Current at the wanted revision.
func (v Verdict) Ready() bool { return v.State == fleeetv1.SyncReady }

// Judge reads the state of a sync's applied Flux objects: Ready only when the
// applier is Current and has applied the wanted revision; Failed when the
// applier or its source failed; Progressing otherwise.
func Judge(o Objects, want Revision) Verdict {
	var status kstatus
	var msg string
	// awaitsArtifact: the applier failed only because its source has no
	// artifact yet.
	awaitsArtifact := false
	switch a := o.Applier.(type) {
	case *kustomizev1.Kustomization:
		status, msg = computeKstatus(a.Generation, a.Status.ObservedGeneration, a.Status.Conditions)
		ready := apimeta.FindStatusCondition(a.Status.Conditions, fleeetv1.ReadyCondition)
		awaitsArtifact = status == failed && ready != nil && ready.Reason == meta.ArtifactFailedReason
	case *helmv2.HelmRelease:
		status, msg = computeKstatus(a.Generation, a.Status.ObservedGeneration, a.Status.Conditions)
		if status != current {
			msg = withFailedAttempt(msg, a.Generation, a.Status.Conditions)
		}
	default:
		return Verdict{State: fleeetv1.SyncProgressing, Message: "not applied yet"}
	}
	applied := AppliedRevision(o.Applier)
	s, sMsg := sourceKstatus(o.Source)
	if s == failed {
		return Verdict{State: fleeetv1.SyncFailed, Revision: applied, Message: "source: " + sMsg}
	}
	switch {
	case awaitsArtifact && s == inProgress:
		// Kustomize-controller marks a Kustomization failed while its new
		// source has not fetched yet; that is waiting, not failing.
		return Verdict{State: fleeetv1.SyncProgressing, Revision: applied, Message: "waiting for the source: " + msg}
	case status == failed:
		return Verdict{State: fleeetv1.SyncFailed, Revision: applied, Message: msg}
	case status == current && want.Matches(applied, artifactRevision(o.Source)):
		return Verdict{State: fleeetv1.SyncReady, Revision: applied, Message: msg}
	case status == current:
		return Verdict{State: fleeetv1.SyncProgressing, Revision: applied,
			Message: fmt.Sprintf("applied %q, waiting for %s", applied, want)}
	default:
		return Verdict{State: fleeetv1.SyncProgressing, Revision: applied, Message: msg}
	}
}

// KeepReadyThroughRecheck keeps a sync that was last reported Ready Ready
// while Flux re-checks it. Every interval, kustomize-controller marks a
// Kustomization Reconciling with Ready=Unknown, and helm-controller a
// HelmRelease Reconciling, while it re-applies the generation it already
// observed: kstatus calls that in progress, and reporting it so would flap
// every cluster's sync, plan and Module summary once per interval with
// nothing changed. Only a plain re-check keeps Ready: the applier at the
// generation it last observed, Reconciling for Progressing (not a retry),
// Ready not False, and the revision last reported Ready still the one
// applied. A re-check that fails is Failed as usual, and a new spec, which
// bumps the generation, is judged as usual.
func KeepReadyThroughRecheck(v Verdict, o Objects, last fleeetv1.SyncStatus) Verdict {
	if v.State != fleeetv1.SyncProgressing || last.State != fleeetv1.SyncReady || last.Revision != v.Revision || !rechecking(o.Applier) {
		return v
	}
	return Verdict{State: fleeetv1.SyncReady, Revision: last.Revision, Message: last.Message}
}

// rechecking reports whether Flux is re-running an applier at the
// generation it last observed, as a plain reconcile rather than a retry.
func rechecking(applier client.Object) bool {
	observed, conds, ok := ApplierStatus(applier)
	reconciling := apimeta.FindStatusCondition(conds, fleeetv1.ReconcilingCondition)
	return ok && observed == applier.GetGeneration() &&
		reconciling != nil && reconciling.Status == metav1.ConditionTrue && reconciling.Reason == meta.ProgressingReason &&
		!apimeta.IsStatusConditionFalse(conds, fleeetv1.ReadyCondition)
}

// ApplierStatus is the observed generation and conditions of a
// Kustomization or HelmRelease; ok is false for any other object.
func ApplierStatus(applier runtime.Object) (observed int64, conds []metav1.Condition, ok bool) {
	switch a := applier.(type) {
	case *kustomizev1.Kustomization:
		return a.Status.ObservedGeneration, a.Status.Conditions, true
	case *helmv2.HelmRelease:
		return a.Status.ObservedGeneration, a.Status.Conditions, true
	}
	return 0, nil, false
}

// withFailedAttempt adds to a HelmRelease's message why its last release
// attempt at this generation failed, unless the message says it already. A
// Helm error before any release is stored (an object the ServiceAccount may
// not touch, say) leaves the HelmRelease retrying with Ready=Unknown, and a
// failed upgrade that remediation rolled back leaves Ready saying only that
// the rollback succeeded; in both, only Released says why.
func withFailedAttempt(msg string, generation int64, conds []metav1.Condition) string {
	c := apimeta.FindStatusCondition(conds, helmv2.ReleasedCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.ObservedGeneration != generation || c.Message == "" || strings.Contains(msg, c.Message) {
		return msg
	}
	return msg + "; the last attempt failed: " + c.Message
}

func sourceKstatus(src client.Object) (kstatus, string) {
	switch s := src.(type) {
	case *sourcev1.GitRepository:
		return computeKstatus(s.Generation, s.Status.ObservedGeneration, s.Status.Conditions)
	case *sourcev1.OCIRepository:
		return computeKstatus(s.Generation, s.Status.ObservedGeneration, s.Status.Conditions)
	case *sourcev1.HelmRepository:
		return computeKstatus(s.Generation, s.Status.ObservedGeneration, s.Status.Conditions)
	}
	return inProgress, ""
}

// artifactRevision is the revision of a git or oci source's artifact, such
// as "v1.0.0@sha1:…"; empty for anything else.
func artifactRevision(src client.Object) string {
	var a *meta.Artifact
	switch s := src.(type) {
	case *sourcev1.GitRepository:
		a = s.Status.Artifact
	case *sourcev1.OCIRepository:
		a = s.Status.Artifact
	}
	if a == nil {
		return ""
	}
	return a.Revision
}

// AppliedRevision is the revision a Kustomization last applied, or the chart
// version of a HelmRelease's latest release, followed by @ and the digest of
// the OCI artifact it came from, if any; empty for anything else.
func AppliedRevision(applier client.Object) string {
	switch a := applier.(type) {
	case *kustomizev1.Kustomization:
		return a.Status.LastAppliedRevision
	case *helmv2.HelmRelease:
		latest := a.Status.History.Latest()
		switch {
		case latest == nil:
		case latest.OCIDigest != "":
			return latest.ChartVersion + "@" + latest.OCIDigest
		default:
			return latest.ChartVersion
		}
	}
	return ""
}
