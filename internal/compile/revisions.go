package compile

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// maxRemembered bounds Revisions: past it, the memory starts afresh, so
// deleted Modules are not remembered for ever.
const maxRemembered = 10000

// Revisions remembers the revisions of Modules read from the apiserver by
// UID and generation (a change to a Module's spec always moves its
// generation), so that compiling every Remote of a namespace hashes each
// Module once rather than once per Remote. A nil *Revisions hashes every
// time, as callers holding Modules changed in memory need.
type Revisions struct {
	mu    sync.Mutex
	byUID map[types.UID]revisionAt
}

type revisionAt struct {
	generation int64
	revision   string
}

// Of returns the revision of m (ModuleRevision).
func (r *Revisions) Of(m *fleeetv1.Module) string {
	if r == nil || m.UID == "" {
		return ModuleRevision(m)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if at, ok := r.byUID[m.UID]; ok && at.generation == m.Generation {
		return at.revision
	}
	if r.byUID == nil || len(r.byUID) >= maxRemembered {
		r.byUID = map[types.UID]revisionAt{}
	}
	revision := ModuleRevision(m)
	r.byUID[m.UID] = revisionAt{m.Generation, revision}
	return revision
}
