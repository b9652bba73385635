package flux

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

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

// DriftMark identifies what helm-controller last said about drift in a
// HelmRelease: its uid with its Drifted condition's status and last
// transition, which move whenever drift is found and whenever it is gone
// again. While the mark stays, so do the drift events' counts, short of a
// correction reported late. Empty for anything but a HelmRelease that
// detects drift.
func DriftMark(applier client.Object) string {
	hr, ok := applier.(*helmv2.HelmRelease)
	if !ok || !hr.GetDriftDetection().MustDetectChanges() {
		return ""
	}
	mark := string(hr.UID)
	if c := apimeta.FindStatusCondition(hr.Status.Conditions, helmv2.DriftedCondition); c != nil {
		mark += "/" + string(c.Status) + "/" + c.LastTransitionTime.UTC().Format(time.RFC3339)
	}
	return mark
}

// ReadDrift reads what helm-controller reported about drift in a
// HelmRelease: its Drifted condition says whether the cluster differs now,
// and its DriftDetected and DriftCorrected events, read from events (which
// lists the Events of the HelmRelease's namespace), how often drift was
// found and put back, and which objects drifted last. helm-controller
// reports no count anywhere else: in Enabled mode it sets Drifted and
// clears it again within one reconcile. Nil for anything but a HelmRelease
// that detects drift, and when no drift was seen.
func ReadDrift(ctx context.Context, events client.Reader, applier client.Object) (*fleeetv1.SyncDrift, error) {
	if DriftMark(applier) == "" {
		return nil, nil
	}
	hr := applier.(*helmv2.HelmRelease)
	d := &fleeetv1.SyncDrift{Drifted: apimeta.IsStatusConditionTrue(hr.Status.Conditions, helmv2.DriftedCondition)}
	var list corev1.EventList
	if err := events.List(ctx, &list, client.InNamespace(hr.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("involvedObject.uid", string(hr.UID))}); err != nil {
		return nil, fmt.Errorf("listing the events of HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
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
	if !d.Seen() {
		return nil, nil
	}
	return d, nil
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
