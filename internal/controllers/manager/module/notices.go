package module

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// notices remembers, per Module, what each kind of standing warning was
// last recorded about, so a warning that holds across reconciles (a Module
// reconciles on every report of every plan of its namespace) is recorded
// once per distinct value, not on each. It lives in memory: a restarted
// manager records each standing warning once more.
type notices struct {
	mu   sync.Mutex
	last map[types.NamespacedName]map[string]string
}

// first records value as what the warning kind of Module key is about and
// reports whether it is new and not empty: whether to record the warning.
func (n *notices) first(key types.NamespacedName, kind, value string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.last == nil {
		n.last = map[types.NamespacedName]map[string]string{}
	}
	if n.last[key] == nil {
		n.last[key] = map[string]string{}
	}
	if n.last[key][kind] == value {
		return false
	}
	n.last[key][kind] = value
	return value != ""
}

// forget drops what was remembered of a deleted Module.
func (n *notices) forget(key types.NamespacedName) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.last, key)
}

// noteIgnored records a Warning event, once per distinct value, when the
// Module's fleeet.dev/approve annotation names no stage awaiting approval
// (awaiting, of the current revision, one per track; approved are the stages already
// approved, whose approvals stay as they are used), or its fleeet.dev/undo
// annotation names another revision. Either then does nothing, and a
// person who wrote it should hear why.
func (r *Reconciler) noteIgnored(m *fleeetv1.Module, revision string, awaiting, approved []string) {
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Name}
	value := m.Annotations[fleeetv1.ApproveAnnotation]
	why := ignoredApproval(m, value, revision, awaiting, approved)
	if r.notices.first(key, "approve", why) {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, fleeetv1.ReasonApprovalIgnored, "Approve",
			"%s %q %s; it approves nothing (fleetctl rollout approve writes the right value)", fleeetv1.ApproveAnnotation, value, why)
	}
	undo, why := m.Annotations[fleeetv1.UndoAnnotation], ""
	if undo != "" && undo != revision {
		why = fmt.Sprintf("names revision %s, not the current revision %s", undo, revision)
	}
	if r.notices.first(key, "undo", why) {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, fleeetv1.ReasonUndoIgnored, "Rollback",
			"%s %q %s; it rolls nothing back", fleeetv1.UndoAnnotation, undo, why)
	}
}

// ignoredApproval says why an approval value approves nothing now, or
// returns "" when it approves a stage awaiting approval, was used
// already, or is empty.
func ignoredApproval(m *fleeetv1.Module, value, revision string, awaiting, approved []string) string {
	if value == "" {
		return ""
	}
	rev, stage, ok := strings.Cut(value, "/")
	switch {
	case !ok || rev == "" || stage == "":
		return "is not of the form <revision>/<stage>"
	case rev != revision:
		return fmt.Sprintf("names revision %s, not the current revision %s", rev, revision)
	case slices.Contains(awaiting, stage) || slices.Contains(approved, stage):
		return ""
	case !slices.ContainsFunc(m.Spec.Rollout.Stages, func(s fleeetv1.RolloutStage) bool { return s.Name == stage }):
		return fmt.Sprintf("names stage %s, which the rollout does not have", stage)
	case len(awaiting) == 0:
		return fmt.Sprintf("names stage %s, which is not awaiting approval (no stage is)", stage)
	case len(awaiting) == 1:
		return fmt.Sprintf("names stage %s, which is not awaiting approval (stage %s is)", stage, awaiting[0])
	}
	return fmt.Sprintf("names stage %s, which is not awaiting approval (stages %s are)", stage, strings.Join(awaiting, ", "))
}
