// Package status holds what every fleeet controller does with its object's
// status: set kstatus conditions and write the status back when it changed.
package status

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SetCondition records a condition about the given generation of an object,
// keeping its transition time when the status does not change.
func SetCondition(conds *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(conds, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: generation,
	})
}

// Update writes obj's whole status if it differs from before (the status as
// read). An object deleted meanwhile is not an error; a conflict is, so the
// reconcile runs again on the newer object.
func Update(ctx context.Context, c client.Client, obj client.Object, before, after any) error {
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	return client.IgnoreNotFound(c.Status().Update(ctx, obj))
}
