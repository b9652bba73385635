package assemblage

import (
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if c := apimeta.FindStatusCondition(conds, fleeetv1.StalledCondition); c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == generation {
		return failed, c.Message
	}
	if ready != nil && ready.Status == metav1.ConditionFalse && ready.ObservedGeneration == generation &&
		(reconciling == nil || reconciling.Status != metav1.ConditionTrue || retrying) {
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

// observed is what the cluster holds for one sync.
type observed struct {
	source  client.Object
	applier client.Object
}

// exists reports whether the sync's applier is in the cluster.
func (o observed) exists() bool { return o.applier != nil }

// specHash is the hash of the spec last applied to the applier.
func (o observed) specHash() string {
	if o.applier == nil {
		return ""
	}
	return o.applier.GetAnnotations()[fleeetv1.SpecHashAnnotation]
}

// verdict is the readiness of a sync's Flux objects against a revision.
type verdict struct {
	state    fleeetv1.SyncState
	revision string
	message  string
}

// ready reports whether the sync is kstatus Current at the wanted revision.
func (v verdict) ready() bool { return v.state == fleeetv1.SyncReady }

// judge reads the state of a sync's applied Flux objects: Ready only when the
// applier is Current and has applied the wanted revision; Failed when the
// applier or its source failed; Progressing otherwise.
func judge(o observed, want revision) verdict {
	var status kstatus
	var msg string
	switch a := o.applier.(type) {
	case *kustomizev1.Kustomization:
		status, msg = computeKstatus(a.Generation, a.Status.ObservedGeneration, a.Status.Conditions)
	case *helmv2.HelmRelease:
		status, msg = computeKstatus(a.Generation, a.Status.ObservedGeneration, a.Status.Conditions)
	default:
		return verdict{state: fleeetv1.SyncProgressing, message: "not applied yet"}
	}
	applied := appliedRevision(o.applier)
	if s, sMsg := sourceKstatus(o.source); s == failed {
		return verdict{state: fleeetv1.SyncFailed, revision: applied, message: "source: " + sMsg}
	}
	switch {
	case status == failed:
		return verdict{state: fleeetv1.SyncFailed, revision: applied, message: msg}
	case status == current && want.matches(applied):
		return verdict{state: fleeetv1.SyncReady, revision: applied, message: msg}
	case status == current:
		return verdict{state: fleeetv1.SyncProgressing, revision: applied,
			message: fmt.Sprintf("applied %q, waiting for %s", applied, want)}
	default:
		return verdict{state: fleeetv1.SyncProgressing, revision: applied, message: msg}
	}
}

func sourceKstatus(src client.Object) (kstatus, string) {
	switch s := src.(type) {
	case *sourcev1.GitRepository:
		return computeKstatus(s.Generation, s.Status.ObservedGeneration, s.Status.Conditions)
	case *sourcev1.HelmRepository:
		return computeKstatus(s.Generation, s.Status.ObservedGeneration, s.Status.Conditions)
	}
	return inProgress, ""
}

// appliedRevision is the revision a Kustomization last applied, or the chart
// version of a HelmRelease's latest release; empty for anything else.
func appliedRevision(applier client.Object) string {
	switch a := applier.(type) {
	case *kustomizev1.Kustomization:
		return a.Status.LastAppliedRevision
	case *helmv2.HelmRelease:
		if latest := a.Status.History.Latest(); latest != nil {
			return latest.ChartVersion
		}
	}
	return ""
}
