package shard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleeet-dev/fleeet/internal/shard"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// Members renew their Leases every third of the duration, not whenever one
// of them renews (which woke each to renew again at once, without end),
// still see a member leave at once, and remember a renewal the apiserver
// was away for.
func TestMembersRenewOnTimeAndSeeAMemberLeave(t *testing.T) {
	g := NewWithT(t)
	c := testenv.StartCluster(t, "management")
	ns := "fleeet-system"
	g.Expect(c.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())

	// Two replicas, each a manager of its own, as two pods are.
	var members []*shard.Members
	var stops []func(bool)
	for _, id := range []string{"r1", "r2"} {
		stop, err := testenv.StartManager(c, "shard-"+id, func(ctx context.Context, mgr ctrl.Manager) error {
			m, err := shard.New(ctx, mgr, "fleet-manager", ns, shard.Options{Identity: id, LeaseDuration: 30 * time.Second})
			members = append(members, m)
			return err
		})
		g.Expect(err).NotTo(HaveOccurred())
		stops = append(stops, stop)
	}
	t.Cleanup(func() { stops[0](t.Failed()) })

	keys := make([]types.NamespacedName, 20)
	for i := range keys {
		keys[i] = types.NamespacedName{Namespace: "tenant", Name: fmt.Sprintf("edge-%02d", i)}
	}
	ownedBy := func(m *shard.Members) int {
		n := 0
		for _, k := range keys {
			if m.Owns(k) {
				n++
			}
		}
		return n
	}
	g.Eventually(func() int { return ownedBy(members[0]) + ownedBy(members[1]) }).WithTimeout(30*time.Second).Should(Equal(len(keys)), "both members live, each Remote owned once")
	g.Expect(ownedBy(members[0])).To(BeNumerically("<", len(keys)), "r2 owns some")

	versions := func() map[string]string {
		leases := &coordinationv1.LeaseList{}
		g.Expect(c.Client.List(t.Context(), leases, client.InNamespace(ns))).To(Succeed())
		rv := map[string]string{}
		for _, l := range leases.Items {
			rv[l.Name] = l.ResourceVersion
		}
		return rv
	}
	before := versions()
	g.Expect(before).To(HaveLen(2))
	g.Consistently(versions).WithTimeout(3*time.Second).Should(Equal(before), "no renewal within a third of the lease duration")

	// r2 stops and deletes its Lease: r1 takes every Remote without waiting
	// for a renewal.
	stops[1](t.Failed())
	g.Eventually(func() int { return ownedBy(members[0]) }).WithTimeout(5 * time.Second).Should(Equal(len(keys)))

	// The apiserver away for one renewal: the member remembers when it
	// could not renew, which the health controller runs Remotes' grace
	// from, and nothing before.
	g.Expect(members[0].LastUnreachable().IsZero()).To(BeTrue(), "every renewal so far reached the apiserver")
	stopped := time.Now()
	g.Expect(c.StopAPIServer()).To(Succeed())
	g.Eventually(members[0].LastUnreachable).WithTimeout(15*time.Second).WithPolling(200*time.Millisecond).
		Should(BeTemporally(">", stopped), "a renewal failed while the apiserver was away")
	g.Expect(c.StartAPIServer()).To(Succeed())
	var nilMembers *shard.Members
	g.Expect(nilMembers.LastUnreachable().IsZero()).To(BeTrue(), "no sharding, no renewals")
}
