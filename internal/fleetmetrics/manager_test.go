package fleetmetrics

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestRolloutStateReadsTheConditions(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status}
	}
	for want, conds := range map[string][]metav1.Condition{
		StateRolledBack:  {cond(fleeetv1.RolledBackCondition, metav1.ConditionTrue), cond(fleeetv1.StalledCondition, metav1.ConditionTrue)},
		StatePaused:      {cond(fleeetv1.RolloutPausedCondition, metav1.ConditionTrue), cond(fleeetv1.ReadyCondition, metav1.ConditionFalse)},
		StateStalled:     {cond(fleeetv1.StalledCondition, metav1.ConditionTrue)},
		StateReady:       {cond(fleeetv1.ReadyCondition, metav1.ConditionTrue)},
		StateProgressing: {cond(fleeetv1.ReadyCondition, metav1.ConditionFalse), cond(fleeetv1.ReconcilingCondition, metav1.ConditionTrue)},
		StateFailed:      {cond(fleeetv1.ReadyCondition, metav1.ConditionFalse)},
	} {
		m := &fleeetv1.Module{Status: fleeetv1.ModuleStatus{Conditions: conds}}
		NewWithT(t).Expect(rolloutState(m)).To(Equal(want))
	}
	NewWithT(t).Expect(rolloutState(&fleeetv1.Module{})).To(Equal(StateProgressing), "not reconciled yet")
	for _, reason := range []string{fleeetv1.ReasonPausedBySpec, fleeetv1.ReasonPausedByAnnotation} {
		paused := metav1.Condition{Type: fleeetv1.RolloutPausedCondition, Status: metav1.ConditionTrue, Reason: reason}
		m := &fleeetv1.Module{Status: fleeetv1.ModuleStatus{Conditions: []metav1.Condition{paused, cond(fleeetv1.ReadyCondition, metav1.ConditionTrue)}}}
		NewWithT(t).Expect(rolloutState(m)).To(Equal(StateReady), "a pause %s asked for by a person is no failure to alert on", reason)
	}
}

func TestTheFleetCollectorReportsRemotesAndModules(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fleeetv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	online := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge-1"},
		Status: fleeetv1.RemoteStatus{Conditions: []metav1.Condition{{Type: fleeetv1.ConnectedCondition, Status: metav1.ConditionTrue},
			{Type: fleeetv1.AgentCompatibleCondition, Status: metav1.ConditionFalse}}}}
	lab := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "lab"}, Spec: fleeetv1.RemoteSpec{Suspend: true},
		Status: fleeetv1.RemoteStatus{Conditions: []metav1.Condition{{Type: fleeetv1.ConnectedCondition, Status: metav1.ConditionFalse}}}}
	app := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "app"},
		Status: fleeetv1.ModuleStatus{Summary: fleeetv1.ModuleSummary{Total: 2, Updated: 1, Ready: 1, Offline: 1, Drifted: 1},
			Conditions: []metav1.Condition{{Type: fleeetv1.RolloutPausedCondition, Status: metav1.ConditionTrue}}}}
	f := &fleetCollector{reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(online, lab, app).Build()}
	want := `
# HELP fleeet_remote_connected 1 while the Remote's cluster is Connected, 0 when it is not.
# TYPE fleeet_remote_connected gauge
fleeet_remote_connected{namespace="team-a",remote="edge-1"} 1
fleeet_remote_connected{namespace="team-a",remote="lab"} 0
# HELP fleeet_remote_agent_skew 1 while the Remote's agent version is outside the skew window of the manager's (AgentCompatible=False), 0 otherwise.
# TYPE fleeet_remote_agent_skew gauge
fleeet_remote_agent_skew{namespace="team-a",remote="edge-1"} 1
fleeet_remote_agent_skew{namespace="team-a",remote="lab"} 0
# HELP fleeet_module_rollout_state 1 for the state the Module's rollout is in (ready, progressing, paused, rolled_back, failed, stalled).
# TYPE fleeet_module_rollout_state gauge
fleeet_module_rollout_state{module="app",namespace="team-a",state="paused"} 1
`
	NewWithT(t).Expect(testutil.CollectAndCompare(f, strings.NewReader(want), "fleeet_remote_connected", "fleeet_remote_agent_skew", "fleeet_module_rollout_state")).To(Succeed())
	NewWithT(t).Expect(testutil.CollectAndCount(f, "fleeet_module_remotes")).To(Equal(9), "one series per state")
	remotes := `
# HELP fleeet_module_remotes The Module's selected Remotes by the state of its sync there (total, updated, ready, failed, blocked, offline, suspended, pods_not_ready, drifted).
# TYPE fleeet_module_remotes gauge
fleeet_module_remotes{module="app",namespace="team-a",state="blocked"} 0
fleeet_module_remotes{module="app",namespace="team-a",state="drifted"} 1
fleeet_module_remotes{module="app",namespace="team-a",state="failed"} 0
fleeet_module_remotes{module="app",namespace="team-a",state="offline"} 1
fleeet_module_remotes{module="app",namespace="team-a",state="pods_not_ready"} 0
fleeet_module_remotes{module="app",namespace="team-a",state="ready"} 1
fleeet_module_remotes{module="app",namespace="team-a",state="suspended"} 0
fleeet_module_remotes{module="app",namespace="team-a",state="total"} 2
fleeet_module_remotes{module="app",namespace="team-a",state="updated"} 1
`
	NewWithT(t).Expect(testutil.CollectAndCompare(f, strings.NewReader(remotes), "fleeet_module_remotes")).To(Succeed())
}
