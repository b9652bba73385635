package shard

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// names are 10,000 Remote keys as the fleet-scale benchmark names them,
// across a few tenant namespaces.
func names() []string {
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d/edge-%05d", i%7, i)
	}
	return keys
}

func owners(keys, members []string) map[string]string {
	o := make(map[string]string, len(keys))
	for _, k := range keys {
		o[k] = Owner(k, members)
	}
	return o
}

// Three members each own a third of 10,000 Remotes, within 5% of it.
func TestOwnerSpreadsRemotesEvenly(t *testing.T) {
	g := NewWithT(t)
	members := []string{"fleet-manager-7d9f-abcde", "fleet-manager-7d9f-fghij", "fleet-manager-7d9f-klmno"}
	count := map[string]int{}
	for _, o := range owners(names(), members) {
		count[o]++
	}
	g.Expect(count).To(HaveLen(3))
	for m, n := range count {
		g.Expect(n).To(BeNumerically("~", 10000/3, 10000/3*5/100), m)
	}
}

// The owner does not depend on the order the members are listed in.
func TestOwnerIgnoresMemberOrder(t *testing.T) {
	g := NewWithT(t)
	keys := names()
	g.Expect(owners(keys, []string{"a", "b", "c"})).To(Equal(owners(keys, []string{"c", "a", "b"})))
	g.Expect(Owner("ns/name", nil)).To(BeEmpty())
}

// When a member leaves, only its Remotes move, and they spread over the
// members that stay.
func TestLeaveMovesOnlyTheLeaversRemotes(t *testing.T) {
	g := NewWithT(t)
	keys := names()
	before := owners(keys, []string{"a", "b", "c"})
	after := owners(keys, []string{"a", "c"})
	took := map[string]int{}
	for _, k := range keys {
		if before[k] != "b" {
			g.Expect(after[k]).To(Equal(before[k]), k)
			continue
		}
		took[after[k]]++
	}
	g.Expect(took).To(HaveLen(2), "both survivors take some of b's Remotes")
	g.Expect(took["a"]).To(BeNumerically("~", took["c"], (took["a"]+took["c"])/10))
}

// When a member joins, about 1/n of the Remotes move, all to it.
func TestJoinMovesAboutOneNthToTheNewMember(t *testing.T) {
	g := NewWithT(t)
	keys := names()
	before := owners(keys, []string{"a", "b", "c"})
	after := owners(keys, []string{"a", "b", "c", "d"})
	moved := 0
	for _, k := range keys {
		if after[k] != before[k] {
			g.Expect(after[k]).To(Equal("d"), k)
			moved++
		}
	}
	g.Expect(moved).To(BeNumerically("~", len(keys)/4, len(keys)/4*5/100))
}

// A lease duration too short to renew in, or an identity that cannot name
// a Lease, is refused with the flag named.
func TestOptionsNameTheFlagTheyRefuse(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Identity: "fleet-manager-7d9f-abcde", LeaseDuration: 15 * time.Second}, ""},
		{Options{Identity: "fleet-manager-7d9f-abcde", LeaseDuration: time.Second}, "--shard-lease-duration=1s: want at least 3s"},
		{Options{Identity: "Laptop.Local", LeaseDuration: 15 * time.Second}, `--shard-identity="Laptop.Local": the membership Lease name fleet-manager-shard-Laptop.Local is invalid`},
		{Options{LeaseDuration: 15 * time.Second}, `--shard-identity="": the membership Lease name fleet-manager-shard- is invalid`},
	} {
		g := NewWithT(t)
		err := tc.o.validate("fleet-manager")
		if tc.want == "" {
			g.Expect(err).NotTo(HaveOccurred())
			continue
		}
		g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
	}
}
