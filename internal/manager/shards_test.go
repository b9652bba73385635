package manager_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/shard"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// shardReplica is one fleet-manager process with sharding on.
type shardReplica struct {
	id      string
	metrics string
	process *testenv.Process
}

// startShardReplica runs a fleet-manager replica called id against c,
// under leader election and sharding in namespace system, with its metrics
// over plain HTTP. Unless servesAdmission, it serves its webhook on a port
// of its own, not where c's apiserver sends admission: of the replicas,
// exactly one serves admission, and the others may be killed.
func startShardReplica(t testing.TB, bin string, c *testenv.Cluster, system, id string, servesAdmission bool, extra ...string) shardReplica {
	t.Helper()
	r := shardReplica{id: id, metrics: testenv.FreeAddr(t)}
	args := []string{"--namespace=" + system, "--leader-elect", "--leader-election-namespace=" + system,
		"--shard-identity=" + id, "--metrics-bind-address=" + r.metrics, "--metrics-secure=false"}
	if !servesAdmission {
		_, port, err := net.SplitHostPort(testenv.FreeAddr(t))
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "--webhook-port="+port)
	}
	// As the chart's ServiceAccount: the webhook's match conditions leave
	// the plans it judges in process to it alone.
	r.process = testenv.StartManagerProcessAs(t, bin, c, testenv.ManagerServiceAccount(t, c, system), append(args, extra...)...)
	return r
}

// gauge reads one of the replica's metrics.
func (r shardReplica) gauge(g Gomega, name string) int {
	status, body := testenv.Get(g, "http://"+r.metrics+"/metrics")
	g.Expect(status).To(Equal(200))
	n, found := parseMetrics(g, body).sum(name)
	g.Expect(found).To(BeTrue(), "replica %s serves %s", r.id, name)
	return int(n)
}

// Three replicas divide the Remotes among them, each Remote owned by exactly
// one; when a replica that owns Remotes but does not lead is killed, the
// survivors take its Remotes over and their plans keep following the
// Module; a replica joining takes some Remotes, and on a graceful stop it
// hands them back at once by deleting its Lease. Two processes given one
// identity are detected. The test runs on
// replicaCluster: the package's shared cluster has an unsharded in-process
// manager compiling every plan.
func TestShardsTakeOverTheRemotesOfAKilledReplica(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c, bin, system := startReplicas(t)
	const remotes = 30

	start := func(id string, servesAdmission bool) shardReplica {
		return startShardReplica(t, bin, c, system, id, servesAdmission, "--shard-lease-duration=6s")
	}
	leader := start("r1", false)
	leaderID := leaseHolder(g, c, system, "")
	victim, admission := start("r2", false), start("r3", true)
	g.Expect(leaseHolder(g, c, system, "")).To(Equal(leaderID), "the first replica still leads; the victim does not")

	ns := tenantIn(t, c)
	var keys []string
	for i := range remotes {
		name := fmt.Sprintf("edge-%02d", i)
		g.Expect(c.Client.Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})).To(Succeed())
		keys = append(keys, ns+"/"+name)
	}
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{})
	m.Namespace = ns
	g.Expect(c.Client.Create(ctx, m)).To(Succeed())
	plansAt := func(tag string) {
		g.Eventually(func(g Gomega) {
			plans := &fleeetv1.ProxyAssemblageList{}
			g.Expect(c.Client.List(ctx, plans, client.InNamespace(ns))).To(Succeed())
			g.Expect(plans.Items).To(HaveLen(remotes))
			for _, pa := range plans.Items {
				g.Expect(pa.Spec.Assemblage.Syncs).To(HaveLen(1), pa.Name)
				g.Expect(pa.Spec.Assemblage.Syncs[0].Source.Git.Tag).To(Equal(tag), pa.Name)
			}
		}, 2*time.Minute, poll).Should(Succeed())
	}
	setTag := func(tag string) {
		patch := fmt.Appendf(nil, `{"spec":{"sync":{"source":{"git":{"tag":%q}}}}}`, tag)
		g.Expect(c.Client.Patch(ctx, m, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	}
	// Each replica sees the same members and owns what the assignment
	// gives it, so the Remotes are divided with none left out or shared:
	// every Remote of the cluster, those of tests before this one included.
	divided := func(live ...shardReplica) map[string][]string {
		var ids []string
		for _, r := range live {
			ids = append(ids, r.id)
		}
		all := &fleeetv1.RemoteList{}
		g.Expect(c.Client.List(ctx, all)).To(Succeed())
		owned := map[string][]string{}
		for _, r := range all.Items {
			k := r.Namespace + "/" + r.Name
			o := shard.Owner(k, ids)
			owned[o] = append(owned[o], k)
		}
		g.Eventually(func(g Gomega) {
			for _, r := range live {
				g.Expect(r.gauge(g, "fleeet_shard_members")).To(Equal(len(live)), r.id)
				g.Expect(r.gauge(g, "fleeet_shard_remotes_owned")).To(Equal(len(owned[r.id])), r.id)
			}
		}, time.Minute, poll).Should(Succeed())
		return owned
	}
	plansAt("v1.0.0")
	owned := divided(leader, victim, admission)
	g.Expect(owned[victim.id]).To(ContainElement(BeElementOf(keys)), "the victim owns some of the test's Remotes")

	// kill -9: the victim's Lease stays until it expires, and its Remotes
	// have no owner until then.
	victim.process.Kill()
	setTag("v2.0.0")
	plansAt("v2.0.0")
	divided(leader, admission)

	joiner := start("r4", false)
	owned = divided(leader, admission, joiner)
	g.Expect(owned[joiner.id]).To(ContainElement(BeElementOf(keys)), "the new replica takes some of the test's Remotes")
	setTag("v3.0.0")
	plansAt("v3.0.0")

	// A graceful stop deletes the replica's Lease: the others take over
	// without waiting for it to expire.
	g.Expect(joiner.process.Stop(30 * time.Second)).To(Succeed())
	g.Expect(apierrors.IsNotFound(c.Client.Get(ctx, client.ObjectKey{Namespace: system, Name: "fleet-manager-shard-r4"}, &coordinationv1.Lease{}))).To(BeTrue())
	divided(leader, admission)

	// A second process given the leader's identity shares its Lease and
	// would act on its Remotes: both say so, in their metrics and logs,
	// and the leader stops saying it once the duplicate is gone.
	g.Expect(leader.gauge(g, "fleeet_shard_identity_shared")).To(Equal(0), "one process per identity so far")
	duplicate := start(leader.id, false)
	for _, r := range []shardReplica{leader, duplicate} {
		g.Eventually(func(g Gomega) int { return r.gauge(g, "fleeet_shard_identity_shared") }, time.Minute, poll).
			Should(Equal(1), "%s's %s", r.id, r.process.LogPath)
	}
	g.Expect(testenv.Tail(duplicate.process.LogPath, 200)).To(ContainSubstring("two replicas run with one --shard-identity"))
	g.Expect(duplicate.process.Stop(30 * time.Second)).To(Succeed())
	g.Eventually(func(g Gomega) int { return leader.gauge(g, "fleeet_shard_identity_shared") }, time.Minute, poll).Should(Equal(0))
	divided(leader, admission)
}
