package registration

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/status"
)

// keyShown bounds how much of a refused label key a condition repeats: the
// cluster writes the keys, and a refused one may be of any length.
const keyShown = 80

// freedKeys is what a registration through tok lets its cluster label:
// the token's freeLabelKeys, less the keys its remoteLabels fix and keys
// under fleeet.dev/, sorted, as FreeLabelKeysAnnotation records them.
func freedKeys(tok *fleeetv1.RegistrationToken) string {
	keys := slices.DeleteFunc(slices.Clone(tok.Spec.FreeLabelKeys), func(k string) bool {
		_, fixed := tok.Spec.RemoteLabels[k]
		return fixed || fleeetv1.ReservedKey(k)
	})
	slices.Sort(keys)
	return strings.Join(slices.Compact(keys), ",")
}

// requestedLabels returns the labels the Remote should carry once its
// cluster's request (status.requestedLabels) is applied, and why each
// refused key is refused, sorted. Only the keys recorded in
// FreeLabelKeysAnnotation change: each is set as requested, or removed
// when not requested; every other label stays as it is.
func requestedLabels(remote *fleeetv1.Remote) (map[string]string, []string) {
	var free []string
	if recorded := remote.Annotations[fleeetv1.FreeLabelKeysAnnotation]; recorded != "" {
		free = strings.Split(recorded, ",")
	}
	requested := remote.Status.RequestedLabels
	labels := maps.Clone(remote.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	for _, k := range free {
		if _, ok := requested[k]; !ok {
			delete(labels, k)
		}
	}
	var refused []string
	for _, k := range slices.Sorted(maps.Keys(requested)) {
		v := requested[k]
		why := ""
		switch {
		case fleeetv1.ReservedKey(k):
			why = "keys under fleeet.dev/ are set only by the fleet manager"
		case !slices.Contains(free, k):
			why = fmt.Sprintf("not a key the Remote's registration freed (%s): the RegistrationToken's labels, "+
				"and labels it does not free, are not the cluster's to choose", cmp.Or(strings.Join(free, ","), "none"))
		default:
			errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...)
			if len(errs) == 0 {
				labels[k] = v
				continue
			}
			why = "not a valid label: " + strings.Join(errs, "; ")
		}
		shown := k
		if len(shown) > keyShown {
			shown = shown[:keyShown] + "..."
		}
		refused = append(refused, fmt.Sprintf("labels[%q]: %s", shown, why))
	}
	return labels, refused
}

// relabel applies the labels the Remote's cluster requests, as far as its
// registration frees them, and says in LabelsApplied what it refused: a
// refused key leaves the Remote's label under it as it is. The update goes
// through admission like any other, so the fleet's policies judge it; a
// refusal there is reported the same way, and the Remote is left as it
// is. A Remote whose cluster requests nothing (an older agent) is left
// alone.
func (r *RemoteReconciler) relabel(ctx context.Context, remote *fleeetv1.Remote) error {
	if remote.Status.RequestedLabels == nil {
		return nil
	}
	labels, refused := requestedLabels(remote)
	if !maps.Equal(labels, remote.Labels) {
		patch := client.MergeFrom(remote.DeepCopy())
		remote.Labels = labels
		err := r.Client.Patch(ctx, remote, patch)
		switch {
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
			// The in-memory labels were not written; nor are any.
			refused = append(refused, "admission refused the change: "+err.Error())
		case err != nil:
			return fmt.Errorf("labelling Remote as its cluster requests: %w", err)
		}
	}
	if len(refused) > 0 {
		status.SetCondition(&remote.Status.Conditions, remote.Generation, fleeetv1.LabelsAppliedCondition, metav1.ConditionFalse,
			fleeetv1.ReasonLabelsRefused, "refused labels the cluster requests (status.requestedLabels): "+strings.Join(refused, "; "))
		return nil
	}
	status.SetCondition(&remote.Status.Conditions, remote.Generation, fleeetv1.LabelsAppliedCondition, metav1.ConditionTrue,
		fleeetv1.ReasonLabelsApplied, "the Remote carries every label its cluster requests")
	return nil
}
