package version

import (
	"fmt"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// MaxAgentMinorsBehind is how many minor versions a fleet agent may lag
// behind the manager. One, so the manager can always be upgraded first and
// the agents after it, a stage at a time, without leaving the window; an
// agent is never ahead of its manager, because a newer agent may write
// fields an older manager's CRDs do not hold. It is the rule Kubernetes
// sets between kubelets and their apiserver, narrowed to one minor while
// fleeet is at v0.
const MaxAgentMinorsBehind = 1

// Skew is where an agent's version stands against its manager's.
type Skew int

const (
	// InWindow: the agent is the manager's build, or at most
	// MaxAgentMinorsBehind minors older in the same major.
	InWindow Skew = iota
	// OutOfWindow: the agent is newer than the manager, of another major, or
	// more than MaxAgentMinorsBehind minors older.
	OutOfWindow
	// Unknown: one of the versions is empty or not a release (a "dev" build)
	// and they differ, so no window applies.
	Unknown
)

// shownRunes is how much of a version a sentence of JudgeSkew quotes: the
// agent's is whatever its cluster reported, of any length.
const shownRunes = 64

// JudgeSkew places agent's version against manager's and says why in a
// sentence that quotes at most shownRunes of each. Equal versions are always
// in the window, dev builds included; pre-release and build suffixes are
// ignored, only major and minor count.
func JudgeSkew(manager, agent string) (Skew, string) {
	switch {
	case agent == "":
		return Unknown, "the agent has not reported its version"
	case agent == manager:
		return InWindow, fmt.Sprintf("agent %.*s is the manager's version", shownRunes, agent)
	}
	m, merr := utilversion.ParseSemantic(manager)
	a, aerr := utilversion.ParseSemantic(agent)
	if merr != nil || aerr != nil {
		return Unknown, fmt.Sprintf("agent %.*s and manager %.*s differ and are not both release versions, so the skew is unknown",
			shownRunes, agent, shownRunes, manager)
	}
	window := fmt.Sprintf("the agent may be at most %d minor version behind the manager and never ahead", MaxAgentMinorsBehind)
	behind := int(m.Minor()) - int(a.Minor())
	if a.Major() != m.Major() || behind < 0 || behind > MaxAgentMinorsBehind {
		return OutOfWindow, fmt.Sprintf("agent %.*s is outside the window of manager %.*s: %s", shownRunes, agent, shownRunes, manager, window)
	}
	return InWindow, fmt.Sprintf("agent %.*s is within the window of manager %.*s", shownRunes, agent, shownRunes, manager)
}
