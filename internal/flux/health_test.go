package flux

import (
	"context"
	"fmt"
	"strings"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestWorkloadsAreTheAppsKindsOfTheInventory(t *testing.T) {
	g := NewWithT(t)
	inv := []kustomizev1.ResourceRef{
		{ID: "apps_web_apps_Deployment", Version: "v1"},
		{ID: "apps_db_apps_StatefulSet", Version: "v1"},
		{ID: "apps_agent_apps_DaemonSet", Version: "v1"},
		{ID: "apps_web-5d9f_apps_ReplicaSet", Version: "v1"},
		{ID: "apps_web__Service", Version: "v1"},
		{ID: "apps_web_example.com_Deployment", Version: "v1"},
		{ID: "malformed", Version: "v1"},
	}
	ks := &kustomizev1.Kustomization{}
	ks.Status.Inventory = &kustomizev1.ResourceInventory{Entries: inv}
	want := []workload{
		{"Deployment", client.ObjectKey{Namespace: "apps", Name: "web"}},
		{"StatefulSet", client.ObjectKey{Namespace: "apps", Name: "db"}},
		{"DaemonSet", client.ObjectKey{Namespace: "apps", Name: "agent"}},
	}
	g.Expect(workloadsOf(ks)).To(Equal(want))

	hr := &helmv2.HelmRelease{}
	hr.Status.Inventory = &helmv2.ResourceInventory{Entries: []helmv2.ResourceRef{{ID: "apps_web_apps_Deployment", Version: "v1"}}}
	g.Expect(workloadsOf(hr)).To(Equal(want[:1]))
	g.Expect(workloadsOf(&helmv2.HelmRelease{})).To(BeEmpty(), "no inventory yet")
}

func TestWorkloadPodsCountsReadyAgainstWanted(t *testing.T) {
	cases := []struct {
		name           string
		obj            client.Object
		ready, desired int32
	}{
		{"deployment defaults to one replica", &appsv1.Deployment{}, 0, 1},
		{"deployment", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(3))},
			Status: appsv1.DeploymentStatus{Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 3}}, 2, 3},
		{"surge pods are no extra health", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(2))},
			Status: appsv1.DeploymentStatus{Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 3}}, 2, 2},
		{"the old pod serving a stuck rollout is not its health", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1))},
			Status: appsv1.DeploymentStatus{Replicas: 2, ReadyReplicas: 1, UpdatedReplicas: 1}}, 0, 1},
		{"a rollout half done", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(4))},
			Status: appsv1.DeploymentStatus{Replicas: 5, ReadyReplicas: 4, UpdatedReplicas: 3}}, 2, 4},
		{"scaled to zero", &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(0))}}, 0, 0},
		{"statefulset", &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(2))},
			Status: appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2}}, 2, 2},
		{"statefulset mid-update", &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(2))},
			Status: appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 1}}, 1, 2},
		{"daemonset", &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 4, CurrentNumberScheduled: 4, NumberReady: 3, UpdatedNumberScheduled: 2}}, 1, 4},
	}
	for _, tc := range cases {
		ready, desired, _ := WorkloadPods(tc.obj)
		NewWithT(t).Expect([]int32{ready, desired}).To(Equal([]int32{tc.ready, tc.desired}), tc.name)
	}
}

// pod builds a pod of the web Deployment with the given container states.
func pod(name string, phase corev1.PodPhase, conds []corev1.PodCondition, containers ...corev1.ContainerStatus) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps", Labels: map[string]string{"app": "web"}},
		Status:     corev1.PodStatus{Phase: phase, Conditions: conds, ContainerStatuses: containers},
	}
}

func waiting(name, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: reason, Message: "secret-looking message that is never copied"}}}
}

func TestPodProblemNamesTheReasonThatExplainsMost(t *testing.T) {
	running := func(name string, ready bool) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Ready: ready, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	}
	readyCond := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	notReady := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	oom := waiting("app", "CrashLoopBackOff")
	oom.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want string // reason and where, or "" for a ready pod
	}{
		{"ready pod", pod("p", corev1.PodRunning, readyCond, running("app", true)), ""},
		{"crash loop", pod("p", corev1.PodRunning, notReady, waiting("app", "CrashLoopBackOff")),
			"CrashLoopBackOff: pod p: container app"},
		{"crash loop says how it last ended", pod("p", corev1.PodRunning, notReady, oom),
			"CrashLoopBackOff: pod p: container app (last terminated: OOMKilled)"},
		{"image pull beats a starting sidecar", pod("p", corev1.PodPending, notReady,
			waiting("sidecar", "ContainerCreating"), waiting("app", "ImagePullBackOff")),
			"ImagePullBackOff: pod p: container app"},
		{"readiness probe", pod("p", corev1.PodRunning, notReady, running("app", false)),
			"ReadinessProbeFailing: pod p: container app"},
		{"unschedulable", pod("p", corev1.PodPending, []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes"}}),
			"Unschedulable: pod p"},
		{"evicted", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}},
			"Evicted: pod p"},
		{"terminated with an error", pod("p", corev1.PodRunning, notReady, corev1.ContainerStatus{Name: "app",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}}),
			"Error: pod p: container app"},
		{"pending, nothing more", pod("p", corev1.PodPending, nil), "Pending: pod p"},
		{"a hostile reason is reduced to letters and digits", pod("p", corev1.PodRunning, notReady,
			waiting("app", "ContainerCreating\n; token=abc"+strings.Repeat("x", 100))),
			"ContainerCreatingtokenabc" + strings.Repeat("x", 64-len("ContainerCreatingtokenabc")) + ": pod p: container app"},
	}
	for _, tc := range cases {
		p := podProblem(tc.pod)
		got := ""
		if p.rank != rankNone {
			got = p.reason + p.where
		}
		NewWithT(t).Expect(got).To(Equal(tc.want), tc.name)
	}
}

func TestReadHealthSumsPodsAndSaysWhyTheFirstShortWorkloadIsShort(t *testing.T) {
	scheme := runtime.NewScheme()
	NewWithT(t).Expect(corev1.AddToScheme(scheme)).To(Succeed())
	NewWithT(t).Expect(appsv1.AddToScheme(scheme)).To(Succeed())
	deployment := func(name string, replicas, ready int32) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
			Status: appsv1.DeploymentStatus{Replicas: replicas, ReadyReplicas: ready, UpdatedReplicas: replicas},
		}
	}
	applier := func(names ...string) *kustomizev1.Kustomization {
		ks := &kustomizev1.Kustomization{}
		ks.Status.Inventory = &kustomizev1.ResourceInventory{}
		for _, n := range names {
			ks.Status.Inventory.Entries = append(ks.Status.Inventory.Entries, kustomizev1.ResourceRef{ID: "apps_" + n + "_apps_Deployment", Version: "v1"})
		}
		return ks
	}
	crashing := pod("web-1", corev1.PodRunning, nil, waiting("app", "CrashLoopBackOff"))
	cases := []struct {
		name    string
		objs    []client.Object
		applier client.Object
		want    *fleeetv1.WorkloadHealth
	}{
		{"no workloads", nil, &kustomizev1.Kustomization{}, nil},
		{"all ready", []client.Object{deployment("web", 2, 2), deployment("api", 1, 1)}, applier("web", "api"),
			&fleeetv1.WorkloadHealth{Workloads: 2, ReadyPods: 3, DesiredPods: 3}},
		{"a crashing pod", []client.Object{deployment("api", 1, 1), deployment("web", 2, 0), crashing}, applier("api", "web"),
			&fleeetv1.WorkloadHealth{Workloads: 2, ReadyPods: 1, DesiredPods: 3, Reason: "CrashLoopBackOff",
				Message: "Deployment web: pod web-1: container app"}},
		{"no pods at all", []client.Object{deployment("web", 1, 0)}, applier("web"),
			&fleeetv1.WorkloadHealth{Workloads: 1, DesiredPods: 1, Reason: ReasonNoPods, Message: "Deployment web: no pods"}},
		{"gone", nil, applier("web"),
			&fleeetv1.WorkloadHealth{Workloads: 1, Reason: ReasonNotFound, Message: "Deployment web: not found"}},
		{"a pod's reason outranks a missing workload", []client.Object{deployment("web", 2, 0), crashing}, applier("gone", "web"),
			&fleeetv1.WorkloadHealth{Workloads: 2, DesiredPods: 2, Reason: "CrashLoopBackOff",
				Message: "Deployment web: pod web-1: container app"}},
	}
	for _, tc := range cases {
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objs...).Build()
		got := ReadHealth(t.Context(), c, c, tc.applier)
		NewWithT(t).Expect(got).To(Equal(tc.want), tc.name)
	}
}

// However many workloads a sync applies, the agent reads at most
// maxWorkloads of them and lists pods for at most maxPodLists, and what it
// reports stays within the schema's limits.
func TestReadHealthIsBounded(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	g.Expect(appsv1.AddToScheme(scheme)).To(Succeed())
	ks := &kustomizev1.Kustomization{}
	ks.Status.Inventory = &kustomizev1.ResourceInventory{}
	var objs []client.Object
	for i := range 100 {
		name := fmt.Sprintf("web-%03d-%s", i, strings.Repeat("x", 200))
		ks.Status.Inventory.Entries = append(ks.Status.Inventory.Entries, kustomizev1.ResourceRef{ID: "apps_" + name + "_apps_Deployment", Version: "v1"})
		objs = append(objs, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps"},
			Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		})
	}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	reads := &countingReader{Reader: base}
	h := ReadHealth(t.Context(), reads, reads, ks)
	g.Expect(h.Workloads).To(Equal(int32(100)))
	g.Expect(h.DesiredPods).To(Equal(int32(maxWorkloads)))
	g.Expect(reads.gets).To(Equal(maxWorkloads))
	g.Expect(reads.lists).To(Equal(maxPodLists))

	// The longest names Kubernetes allows still fit the message's limit.
	long := pod(strings.Repeat("p", 253), corev1.PodRunning, nil, waiting(strings.Repeat("c", 63), "CrashLoopBackOff"))
	long.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: strings.Repeat("R", 300)}
	long.Namespace = "apps"
	g.Expect(base.Create(t.Context(), long)).To(Succeed())
	h = ReadHealth(t.Context(), base, base, ks)
	g.Expect(h.Reason).To(Equal("CrashLoopBackOff"))
	g.Expect(len(h.Message)).To(BeNumerically("<=", maxHealthMessage))
	g.Expect(h.Message).To(HavePrefix("Deployment web-000-"))
}

type countingReader struct {
	client.Reader
	gets, lists int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets++
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.lists++
	return r.Reader.List(ctx, list, opts...)
}
