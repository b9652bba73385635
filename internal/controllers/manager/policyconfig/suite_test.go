package policyconfig_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/policyconfig"
	"github.com/fleeet-dev/fleeet/internal/policy"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
	// managerNamespace is the manager's own namespace, the only one whose
	// ConfigMaps hold policies.
	managerNamespace = "fleeet-system"
)

var (
	// cluster is the apiserver every test of the package shares, with the
	// policy ConfigMap controller running against it.
	cluster *testenv.Cluster
	// engine is the policy engine the controller loads user policies into;
	// the tests evaluate it directly, as the admission webhook would.
	engine *policy.Engine
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, nil, startPolicyConfig))
}

// startPolicyConfig creates the manager's namespace and runs the controller
// in-process against c.
func startPolicyConfig(c *testenv.Cluster) (func(bool), error) {
	ctx := context.Background()
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}); err != nil {
		return nil, err
	}
	var err error
	if engine, err = policy.New(ctx); err != nil {
		return nil, err
	}
	return testenv.StartManager(c, "policyconfig", func(_ context.Context, mgr ctrl.Manager) error {
		return (&policyconfig.Reconciler{Client: mgr.GetClient(), Engine: engine, Namespace: managerNamespace,
			Recorder: mgr.GetEventRecorder("fleet-manager")}).SetupWithManager(mgr)
	})
}

// unique returns a name no other test uses, for ConfigMaps and Rego
// packages alike.
func unique(prefix string) string {
	return fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
}

// probePolicy is a user policy in package fleeet.<pkg> that denies, with
// message pkg, an input whose probe field is pkg.
func probePolicy(pkg string) string {
	return fmt.Sprintf("package fleeet.%s\n\ndeny contains %q if input.probe == %q\n", pkg, pkg, pkg)
}

// policyConfigMap creates a ConfigMap in ns, labelled as holding policies,
// with data, and deletes it when the test ends.
func policyConfigMap(t *testing.T, ns, name string, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{fleeetv1.PolicyLabel: "true"}}, Data: data}
	NewWithT(t).Expect(cluster.Client.Create(t.Context(), cm)).To(Succeed())
	t.Cleanup(func() { _ = client.IgnoreNotFound(cluster.Client.Delete(context.Background(), cm)) })
	return cm
}

// enforced tells whether the probe policy of package pkg is in force.
func enforced(g Gomega, pkg string) bool { return enforcedBy(g, engine, pkg) }

// enforcedBy tells whether the probe policy of package pkg is in force in e.
func enforcedBy(g Gomega, e *policy.Engine, pkg string) bool {
	d, err := e.Evaluate(context.Background(), map[string]any{"probe": pkg})
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	for _, v := range d.Deny {
		if v.Policy == pkg && v.Message == pkg {
			return true
		}
	}
	return false
}

// inForce returns, for Eventually and Consistently, whether the probe
// policy of package pkg is in force.
func inForce(pkg string) func(Gomega) bool {
	return func(g Gomega) bool { return enforced(g, pkg) }
}

// notes returns the notes of the events of type and reason about the
// ConfigMap name in the manager's namespace.
func notes(g Gomega, name, typ, reason string) []string {
	list := &eventsv1.EventList{}
	g.ExpectWithOffset(1, cluster.Client.List(context.Background(), list, client.InNamespace(managerNamespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "ConfigMap" && e.Regarding.Name == name && e.Type == typ && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// configMapName turns a Rego package name into a ConfigMap name.
func configMapName(pkg string) string { return strings.ReplaceAll(pkg, "_", "-") }
