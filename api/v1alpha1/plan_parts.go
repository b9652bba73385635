package v1alpha1

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxPlanParts is how many objects one plan may be split over: the first,
// named as the Remote (or the Upstream downstream), and MaxPlanParts-1
// further parts. With MaxSyncs syncs a part, a plan holds up to 4,096 syncs.
const MaxPlanParts = 8

// partSeparator joins a plan's name and a part's number. Remote and
// Upstream names are DNS labels (no dots), so no Remote's plan can take the
// name of another's part.
const partSeparator = ".p"

// PlanPartName is the name of part k of the plan named plan: the plan's own
// name for part 0, <plan>.p<k> for the others.
func PlanPartName(plan string, part int) string {
	if part == 0 {
		return plan
	}
	return plan + partSeparator + strconv.Itoa(part)
}

// PlanOfPart splits the name of a plan object into the plan's name and the
// part's number: ("web", 0) for "web", ("web", 2) for "web.p2". A name that
// is no part's gives (name, 0).
func PlanOfPart(name string) (string, int) {
	i := strings.LastIndex(name, partSeparator)
	if i < 0 {
		return name, 0
	}
	k, err := strconv.Atoi(name[i+len(partSeparator):])
	if err != nil || k < 1 || k >= MaxPlanParts || strconv.Itoa(k) != name[i+len(partSeparator):] {
		return name, 0
	}
	return name[:i], k
}

// PlanPartNames lists the names of every part a plan named plan may have,
// part 0 first: what a cluster's identity may read.
func PlanPartNames(plan string) []string {
	names := make([]string, MaxPlanParts)
	for k := range names {
		names[k] = PlanPartName(plan, k)
	}
	return names
}

// Whole reports whether parts, the further parts of the plan whose first
// part's spec is s (parts[k-1] is part k, nil when it could not be read),
// are exactly the ones s lists, each at its listed revision. When it is not,
// the error says which part is missing or behind, for a condition.
func (s *AssemblageSpec) Whole(parts []*AssemblageSpec) error {
	if len(parts) < len(s.Parts) {
		return fmt.Errorf("part %d of %d not read yet", len(parts)+1, len(s.Parts)+1)
	}
	for k, want := range s.Parts {
		if parts[k] == nil {
			return fmt.Errorf("part %d of %d not read yet", k+1, len(s.Parts)+1)
		}
		if parts[k].PartRevision != want {
			return fmt.Errorf("part %d of %d is at revision %q, the plan lists %q", k+1, len(s.Parts)+1, parts[k].PartRevision, want)
		}
	}
	return nil
}

// ProxyPlan is one Remote's plan as the management cluster holds it: the
// ProxyAssemblages it is split over, part 0 first, a nil entry for a part
// not read. Each sync is in one part; the compiler's stamp of a sync is on
// the part holding it, and the stamp of a Module whose sync is in no part
// on part 0 (see CompiledAnnotation).
//
// +kubebuilder:object:generate=false
type ProxyPlan []*ProxyAssemblage

// GroupProxyPlans groups plan objects, as listed, by the name of the plan
// (the Remote's) they are parts of.
func GroupProxyPlans(items []ProxyAssemblage) map[string]ProxyPlan {
	plans := make(map[string]ProxyPlan, len(items))
	// A plan in one object, the common case, is a slice of one array
	// shared by all of them: a Module reconcile groups every plan of its
	// namespace. Its capacity is one, so that a further part appended
	// leaves the others' entries alone.
	one := make([]*ProxyAssemblage, len(items))
	for i := range items {
		name, k := PlanOfPart(items[i].Name)
		p, seen := plans[name]
		if !seen && k == 0 {
			one[i] = &items[i]
			plans[name] = one[i : i+1 : i+1]
			continue
		}
		for len(p) <= k {
			p = append(p, nil)
		}
		p[k] = &items[i]
		plans[name] = p
	}
	return plans
}

// Holding returns the part holding the named sync, nil when none does.
func (p ProxyPlan) Holding(sync string) *ProxyAssemblage {
	for _, pa := range p {
		if pa == nil {
			continue
		}
		for i := range pa.Spec.Assemblage.Syncs {
			if pa.Spec.Assemblage.Syncs[i].Name == sync {
				return pa
			}
		}
	}
	return nil
}

// ReportedSync is what the cluster reported for the named sync as the part
// holding it stands (ProxyAssemblage.ReportedSync); nil when no part holds it.
func (p ProxyPlan) ReportedSync(name string) *SyncStatus {
	if pa := p.Holding(name); pa != nil {
		return pa.ReportedSync(name)
	}
	return nil
}

// Listed returns the parts of p that part 0 lists, part 0 first, each at
// the revision part 0 lists for it, a nil entry for a listed part not read
// or not at that revision; nil when part 0 is not read. A part part 0 no
// longer lists is on its way out, one it does not list yet is not
// published, and one at another revision is rewritten but not published
// yet (or its publication was refused): none of them is in the plan. A
// reader judging the plan (what it holds, what the cluster reports) reads
// only these.
func (p ProxyPlan) Listed() ProxyPlan {
	if len(p) == 0 || p[0] == nil {
		return nil
	}
	revisions := p[0].Spec.Assemblage.Parts
	n := 1 + len(revisions)
	published := func(k int) bool {
		return k < len(p) && p[k] != nil && p[k].Spec.Assemblage.PartRevision == revisions[k-1]
	}
	whole := len(p) >= n
	for k := 1; k < n && whole; k++ {
		whole = published(k)
	}
	if whole {
		return p[:n:n] // no copy for the plan of every Remote that is whole
	}
	listed := make(ProxyPlan, n)
	listed[0] = p[0]
	for k := 1; k < n; k++ {
		if published(k) {
			listed[k] = p[k]
		}
	}
	return listed
}

// Syncs returns the union of the syncs of p's parts, part by part.
func (p ProxyPlan) Syncs() []NamedSync {
	var syncs []NamedSync
	for _, pa := range p {
		if pa != nil {
			syncs = append(syncs, pa.Spec.Assemblage.Syncs...)
		}
	}
	return syncs
}
