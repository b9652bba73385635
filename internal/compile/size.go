package compile

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// DefaultMaxPlanBytes is the manager's --max-plan-bytes when none is given,
// and fleetctl diff's.
const DefaultMaxPlanBytes = 512 << 10

// PlanBytes is the size of a ProxyAssemblage spec as the admission policy
// policies/size measures it, count(json.marshal(input.object.spec)): the
// spec as the webhook decodes it (encoding/json, so every number a float64),
// turned into OPA's values (a float64 prints as strconv 'g', so 1234567 is
// 1.234567e+06) and encoded again, counted in characters. The compiler
// fits plans by this measure so that a plan it writes is never one the
// policy refuses; a tenant's helm values full of large numbers must not
// make the two disagree.
func PlanBytes(spec *fleeetv1.ProxyAssemblageSpec) int {
	return policyBytes(spec)
}

// planBytesBound is an upper bound of PlanBytes from one encoding instead
// of three, enough to tell that a typical plan is well within its limit.
// PlanBytes' measure differs from encoding/json's in two ways only: it
// writes each number as OPA does, in at most 24 characters where
// encoding/json wrote at least one digit, and it re-encodes the strings of
// helm values canonically, never longer than encoding/json copied them.
func planBytesBound(spec *fleeetv1.ProxyAssemblageSpec) int {
	raw, err := json.Marshal(spec)
	if err != nil { // the API types always encode
		panic(err)
	}
	digits := 0
	for _, b := range raw {
		if '0' <= b && b <= '9' {
			digits++
		}
	}
	return utf8.RuneCount(raw) + 23*digits
}

// syncBytes is the size, by PlanBytes' measure, of one sync's element in a
// plan's syncs.
func syncBytes(s *fleeetv1.NamedSync) int {
	return policyBytes(s)
}

func policyBytes(v any) int {
	raw, err := json.Marshal(v)
	if err != nil { // the API types always encode
		panic(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		panic(err)
	}
	raw, err = json.Marshal(asPolicySees(doc))
	if err != nil {
		panic(err)
	}
	return utf8.RuneCount(raw)
}

// asPolicySees writes every number of a decoded document as OPA's
// ast.InterfaceToValue does.
func asPolicySees(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			t[k] = asPolicySees(child)
		}
	case []any:
		for i, child := range t {
			t[i] = asPolicySees(child)
		}
	case float64:
		return json.Number(strconv.FormatFloat(t, 'g', -1, 64))
	}
	return v
}

// Change is one Module's sync in a plan over its size limit: what the
// Remote holds of it and what the compiler chose instead, each as the
// PlanBytes of its element in the plan's syncs (0: none), and the part
// holding it.
type Change struct {
	// Name is the Module's.
	Name string
	// Created is the Module's creationTimestamp: older Modules' changes go
	// in first.
	Created time.Time
	// Held and Next are the sizes of what the Remote holds and what it
	// would hold.
	Held, Next int
	// Part is the part of the plan holding the sync, when Held is not 0.
	Part int
}

// PlanShape is the size of a plan apart from its syncs: Empty with none,
// and Array more for the syncs list once it holds one (each sync then adds
// its size and a separator).
type PlanShape struct {
	Empty, Array int
}

// size is the plan's size holding n syncs of sum bytes in all.
func (s PlanShape) size(n, sum int) int {
	if n == 0 {
		return s.Empty
	}
	return s.Empty + s.Array + sum + n
}

// Layout is the shape of a plan: Single when it is held in one object,
// Parts[k] of its part k when it is split over len(Parts) objects at most.
type Layout struct {
	Single PlanShape
	Parts  []PlanShape
}

// Overflow is the plan a left-out change would have made: its size as one
// object and how many syncs it would hold, and the size of a part holding
// that sync alone.
type Overflow struct {
	Bytes, Syncs, Alone int
}

// Placement is where Place puts a plan's syncs: the part of each, and the
// changes left out with the plan each would have made.
type Placement struct {
	Part    map[string]int
	LeftOut map[string]Overflow
}

// Place decides which part of a plan holds each sync, and which changes
// the plan leaves out, to keep every part within limit bytes and maxSyncs
// syncs. The plan starts from what the Remote holds (kept: the syncs that do
// not change; every change at its held size), each sync in the part holding
// it: a sync the Remote runs is never taken away for size, since that would
// delete what it deployed. Changes that do not grow the plan go in first;
// then the others, oldest Module first (creationTimestamp, then name). A
// sync stays in its part while the part has room for it; a new sync, or one
// grown out of its part, goes to the lowest part with room, and is left out
// when none has, so one oversized Module is left out alone and, when
// several compete, the newest lose. A plan that fits one object (Single) is
// put in part 0 whole. When what the Remote holds is over a limit already
// (the limit was lowered), every change growing past it is left out and the
// plan stays over it: admission refuses it, naming the Remote.
func Place(layout Layout, limit, maxSyncs int, kept, changes []Change) Placement {
	parts := make([]struct{ n, sum int }, len(layout.Parts))
	n, sum := 0, 0
	at := map[string]int{}
	add := func(name string, part, bytes, sign int) {
		if bytes > 0 {
			parts[part].n, parts[part].sum = parts[part].n+sign, parts[part].sum+sign*bytes
			n, sum = n+sign, sum+sign*bytes
			at[name] = part
		}
	}
	fits := func(part int, c Change) bool {
		size := layout.Parts[part].size(parts[part].n+1, parts[part].sum+c.Next)
		return size <= limit && parts[part].n < maxSyncs
	}
	for _, c := range slices.Concat(kept, changes) {
		add(c.Name, min(c.Part, len(parts)-1), c.Held, 1)
	}
	grows := func(c Change) bool { return c.Next > c.Held }
	ordered := slices.Clone(changes)
	slices.SortStableFunc(ordered, func(a, b Change) int {
		if ga, gb := grows(a), grows(b); ga != gb {
			if gb {
				return -1
			}
			return 1
		}
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	placed := Placement{Part: at, LeftOut: map[string]Overflow{}}
	for _, c := range ordered {
		held := min(c.Part, len(parts)-1)
		add(c.Name, held, c.Held, -1)
		delete(at, c.Name)
		if c.Next == 0 {
			continue
		}
		if c.Held > 0 && !grows(c) {
			add(c.Name, held, c.Next, 1) // never growing past a limit, it stays where it is
			continue
		}
		// A grown sync keeps its part while the part has room; the count
		// does not change there.
		into := -1
		if c.Held > 0 && layout.Parts[held].size(parts[held].n+1, parts[held].sum+c.Next) <= limit {
			into = held
		}
		for k := 0; into < 0 && k < len(parts); k++ {
			if fits(k, c) {
				into = k
			}
		}
		if into >= 0 {
			add(c.Name, into, c.Next, 1)
			continue
		}
		placed.LeftOut[c.Name] = Overflow{Bytes: layout.Single.size(n+1, sum+c.Next), Syncs: n + 1,
			Alone: layout.Parts[len(parts)-1].size(1, c.Next)}
		add(c.Name, held, c.Held, 1)
	}
	if n <= maxSyncs && layout.Single.size(n, sum) <= limit {
		for name := range at {
			at[name] = 0
		}
	}
	return placed
}
