package flux

import (
	"context"
	"regexp"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// driftCorrectedReason is the reason of the event helm-controller records
// once it has put drifted objects back; helm-controller's API names no
// constant for it.
const driftCorrectedReason = "DriftCorrected"

// maxDriftObjects is SyncDrift.Objects' schema limit.
const maxDriftObjects = 16

// driftedObject is one line of helm-controller's drift summary,
// "Deployment/team-a/web changed (0 additions, 1 changes, 0 removals)" or
// "Service/team-a/web removed": the object is the first word. Anything
// else in an event is not reported.
var driftedObject = regexp.MustCompile(`^([A-Za-z0-9]{1,63}/(?:[a-z0-9.-]{1,63}/)?[a-z0-9.:-]{1,253}) (?:changed|removed)\b`)

// ReadDrift reads what helm-controller reported about drift in a
// HelmRelease's objects: its Drifted condition says whether the cluster
// differs now, and its DriftDetected and DriftCorrected events, read from
// events (which lists the Events of the HelmRelease's namespace), how often
// drift was found and put back, and which objects drifted last. helm-
// controller reports no count anywhere else: in Enabled mode it sets
// Drifted and clears it again within one reconcile. Nil for anything but a
// HelmRelease that detects drift, and when no drift was seen or the events
// cannot be read.
func ReadDrift(ctx context.Context, events client.Reader, applier client.Object) *fleeetv1.SyncDrift {
	hr, ok := applier.(*helmv2.HelmRelease)
	if !ok || !hr.GetDriftDetection().MustDetectChanges() {
		return nil
	}
	d := &fleeetv1.SyncDrift{Drifted: apimeta.IsStatusConditionTrue(hr.Status.Conditions, helmv2.DriftedCondition)}
	var list corev1.EventList
	if err := events.List(ctx, &list, client.InNamespace(hr.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("involvedObject.uid", string(hr.UID))}); err == nil {
		var last string
		for i := range list.Items {
			e := &list.Items[i]
			switch e.Reason {
			case helmv2.DriftDetectedReason:
				d.Detected += eventCount(e)
				if at := eventTime(e); d.LastDetected == nil || at.After(d.LastDetected.Time) {
					d.LastDetected, last = &at, e.Message
				}
			case driftCorrectedReason:
				d.Corrected += eventCount(e)
			}
		}
		d.Objects = driftedObjects(last)
	}
	if !d.Seen() {
		return nil
	}
	return d
}

// eventCount is how many times an event happened: Kubernetes folds
// repeats into one Event's count (or its series' count).
func eventCount(e *corev1.Event) int32 {
	n := e.Count
	if e.Series != nil && e.Series.Count > n {
		n = e.Series.Count
	}
	return max(n, 1)
}

// eventTime is when an event last happened.
func eventTime(e *corev1.Event) metav1.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return metav1.Time{Time: e.Series.LastObservedTime.Time}
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp
	case !e.EventTime.IsZero():
		return metav1.Time{Time: e.EventTime.Time}
	}
	return e.CreationTimestamp
}

// driftedObjects are the objects a drift summary names, at most
// maxDriftObjects of them.
func driftedObjects(message string) []string {
	var out []string
	for _, line := range strings.Split(message, "\n") {
		if m := driftedObject.FindStringSubmatch(strings.TrimSpace(line)); m != nil && len(out) < maxDriftObjects {
			out = append(out, m[1])
		}
	}
	return out
}
