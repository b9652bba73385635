// Package shard divides the fleet-manager's per-Remote work among its
// replicas. Each replica holds a membership Lease of its own in the
// manager's namespace (Members); the live Leases are the members, and each
// Remote belongs to the member Owner picks for it. The per-Remote
// controllers run on every replica and reconcile only the Remotes their
// replica owns; when the members change, each replica enqueues the Remotes
// it has gained.
package shard

import (
	"encoding/binary"
	"hash/fnv"
)

// Owner returns which of members owns key, by rendezvous (highest random
// weight) hashing: every member scores the key and the highest score wins.
// Every replica that sees the same members picks the same owner with no
// coordination; when a member leaves, only its keys move, each to the
// member that scored second; when one joins, it takes from each other
// member only the keys it now scores highest on, about 1/n of them. Owner
// returns "" when there are no members.
func Owner(key string, members []string) string {
	var owner string
	var best uint64
	for _, m := range members {
		w := weight(m, key)
		if owner == "" || w > best || (w == best && m < owner) {
			owner, best = m, w
		}
	}
	return owner
}

// weight is member's score for key: FNV-1a of both, spread by the
// splitmix64 finaliser, since FNV alone leaves keys that differ in their
// last bytes too close for the highest score to be evenly distributed.
func weight(member, key string) uint64 {
	h := fnv.New64a()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(member)))
	h.Write(n[:])
	h.Write([]byte(member))
	h.Write([]byte(key))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
