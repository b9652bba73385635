package fleetview

import (
	"fmt"
	"slices"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/status"
)

// RolloutView is what fleetctl rollout status and the dashboard's Module
// page show.
type RolloutView struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Strategy string `json:"strategy"`
	// Stages lists each stage's Remotes and how many of them hold the
	// current version; the implicit last stage is named "(rest)".
	Stages []StageView `json:"stages,omitempty"`
	// State is the Module's Ready condition, reason and message.
	State string `json:"state"`
	// Holding says what keeps further Remotes from moving.
	Holding string `json:"holding,omitempty"`
	// Paused says who paused the rollout by hand (spec.rollout.paused, the
	// fleeet.dev/pause annotation, or both) and how to lift it, as the
	// Module's RolloutPaused condition says.
	Paused string `json:"paused,omitempty"`
	// VersionPolicy says, for a Module whose version a policy picks, the
	// constraint, the newest version the source offers under it when the
	// sync does not hold that one yet, and the VersionResolved condition.
	VersionPolicy string `json:"versionPolicy,omitempty"`
}

// StageView is one stage's progress.
type StageView struct {
	Name     string `json:"name"`
	Track    string `json:"track,omitempty"`
	Remotes  int    `json:"remotes"`
	Updated  int    `json:"updated"`
	Ready    int    `json:"ready"`
	Offline  int    `json:"offline"`
	Approval string `json:"approval,omitempty"`
	Current  bool   `json:"current,omitempty"`
}

// Rollout returns where m's rollout stands, stage by stage, as fleetctl
// rollout status and the dashboard's Module page show it.
func (f *Fleet) Rollout(m *fleeetv1.Module) RolloutView {
	v := RolloutView{Module: m.Name, Version: compile.Version(&m.Spec.Sync), Revision: compile.ModuleRevision(m),
		Strategy: string(m.Spec.Rollout.Strategy), State: "not reconciled yet"}
	if c := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.ReadyCondition); c != nil {
		v.State = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	}
	v.Paused, _ = status.PausedByHand(m.Status.Conditions)
	v.VersionPolicy = versionPolicy(m, v.Version)
	ro := m.Status.Rollout
	if ro != nil && ro.Revision == v.Revision {
		v.Holding = ro.Holding
	}
	stages := make([]StageView, len(m.Spec.Rollout.Stages)+1)
	for i, st := range m.Spec.Rollout.Stages {
		stages[i] = StageView{Name: st.Name, Track: st.Track, Approval: string(st.Approval)}
	}
	stages[len(stages)-1].Name = "(rest)"
	for i := range f.Remotes {
		r := &f.Remotes[i]
		cell := f.Cell(m, r)
		if !cell.Selected {
			continue
		}
		name, _ := stageOf(m, r)
		k := slices.IndexFunc(m.Spec.Rollout.Stages, func(st fleeetv1.RolloutStage) bool { return st.Name == name })
		if k < 0 {
			k = len(stages) - 1
		}
		st := &stages[k]
		st.Remotes++
		switch {
		case r.Offline():
			st.Offline++
		case cell.Current:
			st.Updated++
			if cell.State == StateReady {
				st.Ready++
			}
		}
	}
	if ro != nil && ro.Revision == v.Revision && ro.RolledBack == nil {
		current := []string{ro.Stage}
		for _, t := range ro.Tracks {
			if ro.Stage != "" { // "": every track done, the rest moving
				current = append(current, t.Stage)
			}
		}
		for _, name := range current {
			k := slices.IndexFunc(m.Spec.Rollout.Stages, func(st fleeetv1.RolloutStage) bool { return st.Name == name })
			if k < 0 {
				k = len(stages) - 1
			}
			stages[k].Current = true
		}
	}
	v.Stages = slices.DeleteFunc(stages, func(st StageView) bool { return st.Remotes == 0 })
	return v
}

// versionPolicy describes m's version policy for RolloutView, or "" when it
// has none.
func versionPolicy(m *fleeetv1.Module, current string) string {
	p := m.Spec.VersionPolicy
	if p == nil {
		return ""
	}
	out := fmt.Sprintf("%q", p.Semver)
	if p.DigestOf != "" {
		out = fmt.Sprintf("digest of tag %q", p.DigestOf)
	}
	if st := m.Status.VersionPolicy; st != nil && st.Available != "" && st.Available != current {
		out += ", pending " + st.Available
		if slices.Contains(st.Skipped, st.Available) {
			out += " (rolled back, not picked again)"
		}
	}
	if c := apimeta.FindStatusCondition(m.Status.Conditions, fleeetv1.VersionResolvedCondition); c != nil {
		return fmt.Sprintf("%s; %s %s: %s", out, c.Status, c.Reason, c.Message)
	}
	return out + "; not resolved yet"
}
