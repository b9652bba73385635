package module

import (
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
)

// dependsOnIndex indexes Modules by the Modules they depend on by name, so
// that a dependency coming, going or selecting other Remotes judges its
// dependents' placement again at once.
const dependsOnIndex = "spec.sync.dependsOn.name"

func indexDependsOn(o client.Object) []string {
	var names []string
	for _, d := range o.(*fleeetv1.Module).Spec.Sync.DependsOn {
		if d.Name != "" {
			names = append(names, d.Name)
		}
	}
	return names
}

// maxUnplacedNamed bounds the Remotes an unplaced dependency's message
// names; the count says how many there are.
const maxUnplacedNamed = 5

// unplaced says, for each Module m depends on by name, on which of the
// Remotes m selects (selected) that Module is not placed: it does not
// exist, or does not select them. m's sync waits there for ever, Blocked
// by the agent, which is all a cluster can tell; upstream the Module says
// where and why. modules are the namespace's, by name. A dependency by
// selector names no one Module: it holds when nothing matches, as
// downstream, and is not checked.
func unplaced(m *fleeetv1.Module, modules map[string]*fleeetv1.Module, selected []*fleeetv1.Remote) []string {
	var msgs []string
	for _, d := range m.Spec.Sync.DependsOn {
		if d.Name == "" || d.Name == m.Name {
			continue
		}
		dep := modules[d.Name]
		var lacking []string
		for _, remote := range selected {
			if dep == nil {
				lacking = append(lacking, remote.Name)
				continue
			}
			// An unparsable selector is its own Module's error, said there.
			if ok, err := compile.Selects(dep.Spec.Selector, remote); err == nil && !ok {
				lacking = append(lacking, remote.Name)
			}
		}
		if len(lacking) == 0 {
			continue
		}
		slices.Sort(lacking)
		named := strings.Join(lacking[:min(len(lacking), maxUnplacedNamed)], ", ")
		if len(lacking) > maxUnplacedNamed {
			named += fmt.Sprintf(" and %d more", len(lacking)-maxUnplacedNamed)
		}
		why := "does not select"
		if dep == nil {
			why = "does not exist, so is placed on none of"
		}
		msgs = append(msgs, fmt.Sprintf("spec.sync.dependsOn[%s]: Module %s %s %d of the Remotes this Module selects (%s); its sync waits there until %s is placed on them",
			d.Name, d.Name, why, len(lacking), named, d.Name))
	}
	return msgs
}
