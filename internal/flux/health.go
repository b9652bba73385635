package flux

import (
	"cmp"
	"context"
	"slices"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// maxWorkloads bounds how many workloads of one sync are read for its health.
const maxWorkloads = 32

// maxPodLists bounds how many of a sync's workloads short of ready pods
// have their pods listed, each reconcile, to say why.
const maxPodLists = 3

// maxPods bounds the pods listed for one workload.
const maxPods = 20

// maxHealthMessage is WorkloadHealth.Message's schema limit.
const maxHealthMessage = 512

// Reasons a workload's pods are not ready that the kubelet does not give.
const (
	// ReasonNoPods: the workload wants pods and has none (its controller
	// has not made them, or cannot).
	ReasonNoPods = "NoPods"
	// ReasonNotFound: the workload in the inventory is gone.
	ReasonNotFound = "NotFound"
	// ReasonUnreadable: the agent may not read the workload or its pods.
	ReasonUnreadable = "Unreadable"
	// ReasonReadinessProbeFailing: a container runs and is not ready, which
	// only its readiness (or startup) probe decides.
	ReasonReadinessProbeFailing = "ReadinessProbeFailing"
	// ReasonPending: a pod is pending and says no more.
	ReasonPending = "Pending"
	// ReasonNotReady: pods are missing or not ready and none says why,
	// typically while a rollout is under way.
	ReasonNotReady = "NotReady"
)

// workload is one Deployment, StatefulSet or DaemonSet a sync applied.
type workload struct {
	Kind string
	client.ObjectKey
}

func (w workload) String() string { return w.Kind + " " + w.Name }

// workloadKinds are the kinds whose pods make a sync's health.
var workloadKinds = []string{"Deployment", "StatefulSet", "DaemonSet"}

// workloadsOf lists the Deployments, StatefulSets and DaemonSets in the
// inventory of a sync's Kustomization or HelmRelease: what Flux applied for
// it, as the tenant's ServiceAccount.
func workloadsOf(applier client.Object) []workload {
	var ids []string
	switch a := applier.(type) {
	case *kustomizev1.Kustomization:
		if a.Status.Inventory != nil {
			for _, e := range a.Status.Inventory.Entries {
				ids = append(ids, e.ID)
			}
		}
	case *helmv2.HelmRelease:
		if a.Status.Inventory != nil {
			for _, e := range a.Status.Inventory.Entries {
				ids = append(ids, e.ID)
			}
		}
	}
	var out []workload
	for _, id := range ids {
		// <namespace>_<name>_<group>_<kind>; names and namespaces never hold "_".
		parts := strings.Split(id, "_")
		if len(parts) != 4 || parts[2] != appsv1.GroupName || !slices.Contains(workloadKinds, parts[3]) {
			continue
		}
		out = append(out, workload{Kind: parts[3], ObjectKey: client.ObjectKey{Namespace: parts[0], Name: parts[1]}})
	}
	return out
}

// NewWorkload returns an empty object of a workload kind, nil for others.
func NewWorkload(kind string) client.Object {
	switch kind {
	case "Deployment":
		return &appsv1.Deployment{}
	case "StatefulSet":
		return &appsv1.StatefulSet{}
	case "DaemonSet":
		return &appsv1.DaemonSet{}
	}
	return nil
}

// WorkloadPods reads how many pods a workload wants and has ready, and the
// selector of its pods. Ready counts pods of the current template only: the
// ready pods less the pods of older templates (their controllers count
// updated pods whether ready or not, and ready pods of any template), so a
// rollout stuck on new pods that never become ready is short of ready pods
// even while the old ones still serve. It is capped at desired: surge pods
// of a rollout are not extra health.
func WorkloadPods(obj client.Object) (ready, desired int32, selector *metav1.LabelSelector) {
	replicas := func(r *int32) int32 {
		if r == nil {
			return 1
		}
		return *r
	}
	switch w := obj.(type) {
	case *appsv1.Deployment:
		ready, desired, selector = w.Status.ReadyReplicas-(w.Status.Replicas-w.Status.UpdatedReplicas), replicas(w.Spec.Replicas), w.Spec.Selector
	case *appsv1.StatefulSet:
		ready, desired, selector = w.Status.ReadyReplicas-(w.Status.Replicas-w.Status.UpdatedReplicas), replicas(w.Spec.Replicas), w.Spec.Selector
	case *appsv1.DaemonSet:
		ready, desired, selector = w.Status.NumberReady-(w.Status.CurrentNumberScheduled-w.Status.UpdatedNumberScheduled), w.Status.DesiredNumberScheduled, w.Spec.Selector
	}
	return min(max(ready, 0), max(desired, 0)), max(desired, 0), selector
}

// ReadHealth reads how the workloads a sync's applier applied are doing:
// each workload from workloads (the agent's cache) and, for the first few
// short of ready pods, their pods from pods, to say why. Nil when the
// applier applied no workload.
func ReadHealth(ctx context.Context, workloads, pods client.Reader, applier client.Object) *fleeetv1.WorkloadHealth {
	all := workloadsOf(applier)
	if len(all) == 0 {
		return nil
	}
	h := &fleeetv1.WorkloadHealth{Workloads: int32(len(all))}
	var found problem
	lists := 0
	for _, w := range all[:min(len(all), maxWorkloads)] {
		obj := NewWorkload(w.Kind)
		if err := workloads.Get(ctx, w.ObjectKey, obj); err != nil {
			p := problem{rank: rankWorkload, reason: ReasonUnreadable, where: w.String() + ": cannot be read"}
			if apierrors.IsNotFound(err) {
				p.reason, p.where = ReasonNotFound, w.String()+": not found"
			}
			found = found.worse(p)
			continue
		}
		ready, desired, selector := WorkloadPods(obj)
		h.ReadyPods += ready
		h.DesiredPods += desired
		if ready < desired && found.rank < rankPod && lists < maxPodLists {
			lists++
			p := podsProblem(ctx, pods, w.Namespace, selector)
			p.where = w.String() + p.where
			found = found.worse(p)
		}
	}
	h.Reason, h.Message = found.reason, truncate(found.where, maxHealthMessage)
	return h
}

// problem is why a workload's pods are not ready, and where.
type problem struct {
	// rank orders problems by how much they explain: a crash says more
	// than a pod still starting, which says more than nothing.
	rank   int
	reason string
	where  string
}

// Ranks of problems; a pod's own reasons rank from rankPod up.
const (
	rankNone = iota
	rankNotReady
	rankWorkload
	rankPod
)

// worse returns the problem that explains more; p on a tie, keeping the first.
func (p problem) worse(q problem) problem {
	if q.rank > p.rank {
		return q
	}
	return p
}

// podsProblem lists up to maxPods pods of a workload and returns the worst
// problem one of them has, where naming the pod and container.
func podsProblem(ctx context.Context, c client.Reader, namespace string, selector *metav1.LabelSelector) problem {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil || selector == nil {
		return problem{rank: rankNotReady, reason: ReasonNotReady}
	}
	list := &corev1.PodList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}, client.Limit(maxPods)); err != nil {
		return problem{rank: rankWorkload, reason: ReasonUnreadable, where: ": its pods cannot be read"}
	}
	worst := problem{rank: rankNotReady, reason: ReasonNotReady}
	live := 0
	for i := range list.Items {
		if pod := &list.Items[i]; pod.DeletionTimestamp.IsZero() {
			live++
			worst = worst.worse(podProblem(pod))
		}
	}
	if live == 0 {
		return problem{rank: rankWorkload, reason: ReasonNoPods, where: ": no pods"}
	}
	return worst
}

// failingWaits are container waiting reasons that do not clear by waiting.
var failingWaits = []string{
	"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError",
}

// podProblem says why a pod is not ready, worst first: a container's
// waiting reason that does not clear by itself (CrashLoopBackOff,
// ImagePullBackOff…), a container's termination reason (OOMKilled, Error),
// the pod's failure (Evicted), Unschedulable, a running container that is
// not ready (ReadinessProbeFailing), a container still starting
// (ContainerCreating), Pending. Rank rankNone when the pod is ready. Reasons
// are reduced to letters and digits, so a pod's status can put nothing else
// into the report, and messages are never read.
func podProblem(pod *corev1.Pod) problem {
	p := problem{}
	if podReady(pod) {
		return p
	}
	consider := func(rank int, reason, container string) {
		reason = sanitizeReason(reason)
		if reason == "" || rank <= p.rank {
			return
		}
		p.rank, p.reason, p.where = rank, reason, ": pod "+pod.Name
		if container != "" {
			p.where += ": container " + container
		}
	}
	statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
	for _, cs := range statuses {
		container := cs.Name
		if last := cs.LastTerminationState.Terminated; last != nil && sanitizeReason(last.Reason) != "" {
			container += " (last terminated: " + sanitizeReason(last.Reason) + ")"
		}
		switch {
		case cs.State.Waiting != nil && slices.Contains(failingWaits, cs.State.Waiting.Reason):
			consider(rankPod+6, cs.State.Waiting.Reason, container)
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0:
			consider(rankPod+5, cs.State.Terminated.Reason, cs.Name)
		case cs.State.Running != nil && !cs.Ready:
			consider(rankPod+2, ReasonReadinessProbeFailing, container)
		case cs.State.Waiting != nil:
			consider(rankPod+1, cs.State.Waiting.Reason, container)
		}
	}
	if pod.Status.Phase == corev1.PodFailed {
		consider(rankPod+4, cmp.Or(pod.Status.Reason, string(corev1.PodFailed)), "")
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			consider(rankPod+3, c.Reason, "")
		}
	}
	if pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "" {
		consider(rankPod, ReasonPending, "")
	}
	return p
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sanitizeReason keeps the ASCII letters and digits of a reason, at most 64.
func sanitizeReason(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() == 64 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}
