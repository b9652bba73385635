package testenv_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// probeImage is ./internal/testenv/nodeprobe, imported into the node.
const probeImage = "testenv.fleeet.invalid/nodeprobe:1"

func TestNodeRunsPodsThatReachTheAPIServerAndThatTheAPIServerReaches(t *testing.T) {
	c := testenv.StartCluster(t, "nodes", testenv.WithNodes())
	node := c.StartNode(t, "node-1")
	node.ImportImage(t, testenv.GoImage(t, "./internal/testenv/nodeprobe", probeImage))
	ns := c.Namespace(t, "probe", nil)
	clientset, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("DeploymentOfTwoReplicasBecomesReady", func(t *testing.T) {
		g := NewWithT(t)
		caPEM, tlsSecret := servingSecret(t, "probe."+ns+".svc")
		tlsSecret.Namespace = ns
		g.Expect(c.Client.Create(t.Context(), tlsSecret)).To(Succeed())
		g.Expect(c.Client.Create(t.Context(), probeService(ns))).To(Succeed())
		deploy := probeDeployment(ns, 2)
		created := time.Now()
		g.Expect(c.Client.Create(t.Context(), deploy)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(c.Client.Get(t.Context(), client.ObjectKeyFromObject(deploy), deploy)).To(Succeed())
			g.Expect(deploy.Status.ReadyReplicas).To(Equal(int32(2)), "%s", podStates(t, c, ns))
		}).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
		t.Logf("Deployment of 2 replicas Ready %s after it was created", time.Since(created).Round(time.Millisecond))

		pods := &corev1.PodList{}
		g.Expect(c.Client.List(t.Context(), pods, client.InNamespace(ns), client.MatchingLabels{"app": "probe"})).To(Succeed())
		for _, p := range pods.Items {
			g.Expect(p.Spec.NodeName).To(Equal(node.Name))
			g.Expect(p.Status.PodIP).To(HavePrefix(strings.TrimSuffix(node.PodCIDR, "0/24")))
		}

		t.Run("APIServerCallsAWebhookServedByThePodsThroughTheirService", func(t *testing.T) {
			g := NewWithT(t)
			webhook := probeWebhook(ns, caPEM)
			g.Expect(c.Client.Create(t.Context(), webhook)).To(Succeed())
			t.Cleanup(func() { _ = c.Client.Delete(t.Context(), webhook) })
			// The apiserver picks up webhook configurations asynchronously.
			g.Eventually(func() error {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "denied-", Namespace: ns, Labels: map[string]string{"probe": "deny"}}}
				return c.Client.Create(t.Context(), cm)
			}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("denied by probe-")))
		})

		t.Run("APIServerProxiesToAPodThroughItsService", func(t *testing.T) {
			g := NewWithT(t)
			body, err := clientset.CoreV1().Services(ns).ProxyGet("https", "probe", "443", "/hello", nil).DoRaw(t.Context())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(body)).To(HavePrefix("hello from probe-"))
		})
	})

	t.Run("PodReachesTheAPIServerThroughTheKubernetesServiceWithItsToken", func(t *testing.T) {
		g := NewWithT(t)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "whoami", Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "whoami", Image: probeImage, Args: []string{"whoami"}}},
			},
		}
		// The ServiceAccount admission plugin refuses Pods until
		// kube-controller-manager created the namespace's default
		// ServiceAccount.
		g.Eventually(func() error { return c.Client.Create(t.Context(), pod) }).WithTimeout(30 * time.Second).Should(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(c.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded), "%s", podStates(t, c, ns))
		}).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
		user := "system:serviceaccount:" + ns + ":default"
		g.Expect(pod.Status.ContainerStatuses[0].State.Terminated.Message).To(Equal(user))

		// The apiserver reads the container's log from the kubelet.
		log, err := clientset.CoreV1().Pods(ns).GetLogs("whoami", &corev1.PodLogOptions{}).DoRaw(t.Context())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.TrimSpace(string(log))).To(Equal(user))
	})

	// The soak fills tenants' quotas: kube-controller-manager counts what
	// a namespace uses, and admission refuses a Pod beyond its quota.
	t.Run("AFullQuotaRefusesPods", func(t *testing.T) {
		g := NewWithT(t)
		full := c.Namespace(t, "quota", nil)
		quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "full", Namespace: full},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
		g.Expect(c.Client.Create(t.Context(), quota)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(c.Client.Get(t.Context(), client.ObjectKeyFromObject(quota), quota)).To(Succeed())
			g.Expect(quota.Status.Used).To(HaveKey(corev1.ResourcePods), "counted by kube-controller-manager")
		}).WithTimeout(30 * time.Second).Should(Succeed())
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "over", Namespace: full},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: probeImage}}}}
		g.Eventually(func() error { return c.Client.Create(t.Context(), pod) }).WithTimeout(30 * time.Second).
			Should(MatchError(ContainSubstring("exceeded quota: full")))
	})

	rss := node.MemoryRSS()
	t.Logf("resident memory: kubelet %d MiB, containerd %d MiB, shims %d MiB, kube-proxy %d MiB",
		rss["kubelet"]>>20, rss["containerd"]>>20, rss["shims"]>>20, rss["kube-proxy"]>>20)
}

func TestPodsOnTwoNodesReachEachOtherThroughAClusterIP(t *testing.T) {
	g := NewWithT(t)
	c := testenv.StartCluster(t, "nodes", testenv.WithNodes())
	image := testenv.GoImage(t, "./internal/testenv/nodeprobe", probeImage)
	nodes := []*testenv.Node{c.StartNode(t, "node-1"), c.StartNode(t, "node-2")}
	for _, n := range nodes {
		n.ImportImage(t, image)
	}
	ns := c.Namespace(t, "probe", nil)

	_, tlsSecret := servingSecret(t, "probe."+ns+".svc")
	tlsSecret.Namespace = ns
	g.Expect(c.Client.Create(t.Context(), tlsSecret)).To(Succeed())
	svc := probeService(ns)
	g.Expect(c.Client.Create(t.Context(), svc)).To(Succeed())
	deploy := probeDeployment(ns, 1)
	deploy.Spec.Template.Spec.NodeName = nodes[0].Name
	g.Eventually(func() error { return c.Client.Create(t.Context(), deploy) }).WithTimeout(30 * time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(t.Context(), client.ObjectKeyFromObject(deploy), deploy)).To(Succeed())
		g.Expect(deploy.Status.ReadyReplicas).To(Equal(int32(1)), "%s", podStates(t, c, ns))
	}).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())

	// kube-proxy on node-2 programs the Service once it sees the ready
	// endpoint, which may be just after the Pod first asks: the kubelet
	// restarts a failed try.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "get", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:      nodes[1].Name,
			RestartPolicy: corev1.RestartPolicyOnFailure,
			Containers: []corev1.Container{{Name: "get", Image: probeImage,
				Args: []string{"get", "http://" + svc.Spec.ClusterIP + "/hello"}}},
		},
	}
	g.Expect(c.Client.Create(t.Context(), pod)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded), "%s", podStates(t, c, ns))
	}).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	g.Expect(pod.Status.ContainerStatuses[0].State.Terminated.Message).To(HavePrefix("hello from probe-"))
}

func probeDeployment(ns string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "probe"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:  "probe",
						Image: probeImage,
						Args:  []string{"serve"},
						Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
						}}},
						Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}, {Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1,
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{
						Secret: &corev1.SecretVolumeSource{SecretName: "probe-tls"},
					}}},
				},
			},
		},
	}
}

func probeService(ns string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "probe"},
			Ports: []corev1.ServicePort{
				{Name: "https", Port: 443, TargetPort: intstr.FromString("https")},
				{Name: "http", Port: 80, TargetPort: intstr.FromString("http")},
			},
		},
	}
}

// probeWebhook sends the creation of ConfigMaps labelled probe=deny in ns
// to the probe Service.
func probeWebhook(ns string, caPEM []byte) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "probe.testenv.fleeet.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "probe", Path: ptr.To("/validate"), Port: ptr.To(int32(443))},
				CABundle: caPEM,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"probe": "deny"}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// servingSecret is testenv.ServingCertificate for dnsName as the probe-tls
// Secret, and the certificate's PEM as a caBundle.
func servingSecret(t *testing.T, dnsName string) ([]byte, *corev1.Secret) {
	t.Helper()
	dir, certPEM := testenv.ServingCertificate(t, dnsName)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe-tls"}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{}}
	for _, key := range []string{"tls.crt", "tls.key"} {
		data, err := os.ReadFile(filepath.Join(dir, key))
		if err != nil {
			t.Fatal(err)
		}
		secret.Data[key] = data
	}
	return certPEM, secret
}

// podStates describes the Pods of ns, for a failed wait's message.
func podStates(t *testing.T, c *testenv.Cluster, ns string) string {
	pods := &corev1.PodList{}
	if err := c.Client.List(t.Context(), pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\n%s on %q: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, ", %s=%s %s", cond.Type, cond.Status, cond.Message)
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, ", %s waiting: %s %s", cs.Name, w.Reason, w.Message)
			}
			if term := cs.State.Terminated; term != nil {
				fmt.Fprintf(&b, ", %s terminated: %s %s", cs.Name, term.Reason, term.Message)
			}
		}
	}
	return b.String()
}
