package compiler

import (
	"encoding/json"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
)

// plan is what one compile decides a Remote's ProxyAssemblages hold, part
// by part, part 0 first.
type plan struct {
	// parts are the parts' spec.assemblage: syncs sorted by name, the
	// Remote's RetryAnnotation as retryRequestedAt, and the revisions of
	// the further parts (listed by part 0, carried by each).
	parts []fleeetv1.AssemblageSpec
	// own are, per part, the stamps of the syncs it holds, part 0's also
	// those of the Modules whose sync is in no part.
	own []map[string]fleeetv1.Compiled
	// compiled is, per part, the JSON of own, its CompiledAnnotation; empty
	// when a CompiledPlan holds the stamps (shared).
	compiled []string
	// shared is, per part of a plan whose parts name CompiledPlans (the
	// Remote's wire form, share), the ones they name; nil otherwise.
	shared []sharedRefs
	// stamps are every selecting Module's stamp, parts' and left-out
	// Modules' alike.
	stamps map[string]fleeetv1.Compiled
}

// planOf splits the stamps of a compile over its parts: each part stamps
// the syncs it holds, part 0 also the Modules whose sync is in no part. A
// plan in one part is one object as it always was, with every stamp.
func planOf(parts compile.Parts, stamps map[string]fleeetv1.Compiled, retry string) (plan, error) {
	if len(parts) == 0 {
		parts = compile.Parts{nil}
	}
	p := plan{parts: make([]fleeetv1.AssemblageSpec, len(parts)), own: make([]map[string]fleeetv1.Compiled, len(parts)),
		compiled: make([]string, len(parts)), stamps: stamps}
	rest := maps.Clone(stamps)
	for k := len(parts) - 1; k >= 0; k-- {
		own := rest // part 0's: what no further part stamps
		if k > 0 {
			own = map[string]fleeetv1.Compiled{}
			for _, s := range parts[k] {
				if stamp, ok := stamps[s.Name]; ok {
					own[s.Name] = stamp
					delete(rest, s.Name)
				}
			}
		}
		compiled, err := json.Marshal(own)
		if err != nil {
			return plan{}, err
		}
		p.own[k], p.compiled[k] = own, string(compiled)
		p.parts[k] = fleeetv1.AssemblageSpec{Syncs: parts[k], RetryRequestedAt: retry}
		if k > 0 {
			p.parts[k].PartRevision = compile.PartRevision(parts[k], retry)
		}
	}
	for k := 1; k < len(parts); k++ {
		p.parts[0].Parts = append(p.parts[0].Parts, p.parts[k].PartRevision)
	}
	return p, nil
}

// heldBy reports whether pa, the plan's part k, holds it already, stamps
// included: a part that did not change is not written again.
func (p plan) heldBy(k int, pa *fleeetv1.ProxyAssemblage) bool {
	if pa == nil {
		return false
	}
	have, want := &pa.Spec.Assemblage, &p.parts[k]
	return have.RetryRequestedAt == want.RetryRequestedAt && have.PartRevision == want.PartRevision && slices.Equal(have.Parts, want.Parts) &&
		equality.Semantic.DeepEqual(have.Syncs, want.Syncs) && pa.Annotations[fleeetv1.CompiledAnnotation] == p.compiled[k] &&
		pa.Spec.CompiledPlan == p.sharedRefs(k).entries && pa.Annotations[fleeetv1.CompiledPlanAnnotation] == p.sharedRefs(k).stamps
}

// union is every sync of the plan.
func (p plan) union() []fleeetv1.NamedSync {
	var syncs []fleeetv1.NamedSync
	for _, part := range p.parts {
		syncs = append(syncs, part.Syncs...)
	}
	return syncs
}

// sharedRefs are the CompiledPlans a plan part names: the one holding its
// shared entries (ProxyAssemblageSpec.CompiledPlan) and the one holding its
// stamps (CompiledPlanAnnotation).
type sharedRefs struct{ entries, stamps string }

// sharedRefs returns the CompiledPlans part k names; none for a plan whose
// parts name none.
func (p plan) sharedRefs(k int) sharedRefs {
	if p.shared == nil {
		return sharedRefs{}
	}
	return p.shared[k]
}
