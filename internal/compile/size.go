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
// PlanBytes of its element in the plan's syncs (0: none).
type Change struct {
	// Name is the Module's.
	Name string
	// Created is the Module's creationTimestamp: older Modules' changes go
	// in first.
	Created time.Time
	// Held and Next are the sizes of what the Remote holds and what it
	// would hold.
	Held, Next int
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

// Overflow is the plan a left-out change would have made: its size and
// how many syncs it would hold.
type Overflow struct {
	Bytes, Syncs int
}

// Fit decides which changes a plan leaves out to stay within limit bytes
// and maxSyncs syncs. The plan starts from what the Remote holds (kept:
// the sizes of the syncs that do not change; every change at its held
// size): a sync the Remote runs is never taken away for size, since that
// would delete what it deployed. Changes that do not grow the plan go in
// first; then the others, oldest Module first (creationTimestamp, then
// name), each if it still fits, so one oversized Module is left out alone
// and, when several compete, the newest lose. A change that grows a sync
// is left out only for bytes; one that adds a sync, for bytes or for the
// count. It returns, per left-out change, the plan it would have made.
// When what the Remote holds is over a limit already (the limit was
// lowered), every change growing past it is left out and the plan stays
// over it: admission refuses it, naming the Remote.
func Fit(shape PlanShape, limit, maxSyncs int, kept []int, changes []Change) map[string]Overflow {
	n, sum := 0, 0
	add := func(bytes, sign int) {
		if bytes > 0 {
			n, sum = n+sign, sum+sign*bytes
		}
	}
	for _, b := range kept {
		add(b, 1)
	}
	for _, c := range changes {
		add(c.Held, 1)
	}
	ordered := slices.Clone(changes)
	grows := func(c Change) bool { return c.Next > c.Held }
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
	leftOut := map[string]Overflow{}
	for _, c := range ordered {
		add(c.Held, -1)
		add(c.Next, 1)
		size := shape.size(n, sum)
		adds := c.Held == 0 && c.Next > 0
		if grows(c) && size > limit || adds && n > maxSyncs {
			leftOut[c.Name] = Overflow{Bytes: size, Syncs: n}
			add(c.Next, -1)
			add(c.Held, 1)
		}
	}
	return leftOut
}
