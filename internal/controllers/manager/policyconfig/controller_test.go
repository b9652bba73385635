package policyconfig_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/policyconfig"
	"github.com/fleeet-dev/fleeet/internal/policy"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// A policy added at runtime is compiled into the engine and said so on its
// ConfigMap; only keys ending in .rego are policies.
func TestAUserPolicyIsLoadedWithoutARestart(t *testing.T) {
	g := NewWithT(t)
	pkg := unique("loaded")
	cm := policyConfigMap(t, managerNamespace, configMapName(pkg), map[string]string{
		"policy.rego": probePolicy(pkg),
		"README.md":   "Denies probes named " + pkg + ". This is not Rego {",
	})
	g.Eventually(inForce(pkg), timeout, poll).Should(BeTrue())
	g.Eventually(func(g Gomega) []string {
		return notes(g, cm.Name, corev1.EventTypeNormal, fleeetv1.ReasonPolicyLoaded)
	}, timeout, poll).Should(ContainElement(MatchRegexp(`^Policies compiled and in force \(\d+ module\(s\) from \d+ ConfigMap\(s\)\)$`)))
	g.Expect(notes(g, cm.Name, corev1.EventTypeWarning, fleeetv1.ReasonPolicyRejected)).To(BeEmpty())
}

// A ConfigMap whose Rego does not compile is told why, naming the file;
// the policies in force stay until the set compiles again.
func TestBadRegoIsRejectedAndThePoliciesInForceStay(t *testing.T) {
	g := NewWithT(t)
	good := unique("good")
	policyConfigMap(t, managerNamespace, configMapName(good), map[string]string{"policy.rego": probePolicy(good)})
	g.Eventually(inForce(good), timeout, poll).Should(BeTrue())

	for name, tc := range map[string]struct {
		rego string
		want string
	}{
		"a syntax error": {"package fleeet.PKG\n\ndeny contains msg if {\n", "/policy.rego:"},
		"a rule in a built-in policy's package": {"package fleeet.sources\n\ndeny contains \"never\" if false\n",
			"/policy.rego: package fleeet.sources belongs to a built-in policy; user policies may only add their own packages, never rules to built-in ones"},
		"a package nested below fleeet.<name>": {"package fleeet.PKG.deeper\n\ndeny contains \"never\" if false\n",
			"/policy.rego: package data.fleeet.PKG.deeper: a user policy's package must be fleeet.<name>, one level below fleeet"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			bad := unique("bad")
			cm := policyConfigMap(t, managerNamespace, configMapName(bad), map[string]string{"policy.rego": strings.ReplaceAll(tc.rego, "PKG", bad)})
			g.Eventually(func(g Gomega) []string {
				return notes(g, cm.Name, corev1.EventTypeWarning, fleeetv1.ReasonPolicyRejected)
			}, timeout, poll).Should(ContainElement(And(
				HavePrefix("Policy rejected, the previous policies stay in force: "),
				ContainSubstring(cm.Name+strings.ReplaceAll(tc.want, "PKG", bad)))))
			g.Expect(enforced(g, good)).To(BeTrue(), "the policies in force stay")

			// While the set does not compile, a new policy waits for it, and
			// is told which file holds it back.
			late := unique("late")
			lateCM := policyConfigMap(t, managerNamespace, configMapName(late), map[string]string{"policy.rego": probePolicy(late)})
			g.Eventually(func(g Gomega) []string {
				return notes(g, lateCM.Name, corev1.EventTypeWarning, fleeetv1.ReasonPolicyRejected)
			}, timeout, poll).Should(ContainElement(ContainSubstring(cm.Name + "/policy.rego")))
			g.Consistently(inForce(late), time.Second, poll).Should(BeFalse())
			g.Expect(cluster.Client.Delete(t.Context(), cm)).To(Succeed())
			g.Eventually(inForce(late), timeout, poll).Should(BeTrue())
		})
	}
}

// A ConfigMap's Rego leaves the engine with its label or with the
// ConfigMap.
func TestAPolicyLeavesWithItsLabelOrItsConfigMap(t *testing.T) {
	g := NewWithT(t)
	unlabelled, deleted := unique("unlabelled"), unique("deleted")
	first := policyConfigMap(t, managerNamespace, configMapName(unlabelled), map[string]string{"policy.rego": probePolicy(unlabelled)})
	second := policyConfigMap(t, managerNamespace, configMapName(deleted), map[string]string{"policy.rego": probePolicy(deleted)})
	g.Eventually(inForce(unlabelled), timeout, poll).Should(BeTrue())
	g.Eventually(inForce(deleted), timeout, poll).Should(BeTrue())

	g.Expect(cluster.Client.Patch(t.Context(), first, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+fleeetv1.PolicyLabel+`":null}}}`)))).To(Succeed())
	g.Eventually(inForce(unlabelled), timeout, poll).Should(BeFalse())
	g.Expect(enforced(g, deleted)).To(BeTrue())

	g.Expect(cluster.Client.Delete(t.Context(), second)).To(Succeed())
	g.Eventually(inForce(deleted), timeout, poll).Should(BeFalse())
}

// Only the manager's namespace holds policies: a tenant cannot add one by
// labelling a ConfigMap of its own.
func TestConfigMapsElsewhereAreNotPolicies(t *testing.T) {
	g := NewWithT(t)
	tenant := cluster.Namespace(t, "tenant", nil)
	foreign, ours := unique("foreign"), unique("ours")
	policyConfigMap(t, tenant, configMapName(foreign), map[string]string{"policy.rego": probePolicy(foreign)})
	policyConfigMap(t, managerNamespace, configMapName(ours), map[string]string{"policy.rego": probePolicy(ours)})
	g.Eventually(inForce(ours), timeout, poll).Should(BeTrue())
	g.Expect(enforced(g, foreign)).To(BeFalse())
}

// A replica is not ready until the user policies present when it starts
// are in force — never ready with the built-in policies alone — and a
// ConfigMap that does not compile does not hold it back: the valid ones are
// in force, and the invalid one is told why.
func TestAReplicaIsReadyOnlyOnceThePoliciesPresentAtStartAreInForce(t *testing.T) {
	g := NewWithT(t)
	good, bad := unique("present"), unique("broken")
	policyConfigMap(t, managerNamespace, configMapName(good), map[string]string{"policy.rego": probePolicy(good)})
	broken := policyConfigMap(t, managerNamespace, configMapName(bad), map[string]string{"policy.rego": "package fleeet." + bad + "\n\ndeny contains msg if {\n"})

	// A second replica, with an engine of its own, started after the
	// ConfigMaps exist.
	replica, err := policy.New(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	r := &policyconfig.Reconciler{Engine: replica, Namespace: managerNamespace}
	g.Expect(r.Ready(nil)).To(MatchError(policyconfig.ErrNotLoaded))
	testenv.RunManager(t, cluster, "replica", func(_ context.Context, mgr ctrl.Manager) error {
		r.Client, r.Recorder = mgr.GetClient(), mgr.GetEventRecorder("fleet-manager")
		return r.SetupWithManager(mgr)
	})
	deadline := time.Now().Add(timeout)
	for r.Ready(nil) != nil {
		// While it is not ready, its engine may hold the built-in policies
		// only; the moment it is, the present policy must be in force.
		g.Expect(time.Now().Before(deadline)).To(BeTrue(), "the replica never became ready")
		time.Sleep(time.Millisecond)
	}
	g.Expect(enforcedBy(g, replica, good)).To(BeTrue(), "ready means the policies present at start are in force")
	g.Eventually(func(g Gomega) []string {
		return notes(g, broken.Name, corev1.EventTypeWarning, fleeetv1.ReasonPolicyRejected)
	}, timeout, poll).Should(ContainElement(And(
		HavePrefix("Policy rejected and left out of the policies in force: "), ContainSubstring(broken.Name+"/policy.rego:"))))
}
