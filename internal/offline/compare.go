package offline

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
)

// Key names one rendering: a sync of a Remote's plan or, with Sync empty,
// the plan's notes.
type Key struct {
	Namespace, Remote, Sync string
}

// path is how diffs name a rendering: namespace/remote/sync.
func (k Key) path() string {
	sync := k.Sync
	if sync == "" {
		sync = "(plan)"
	}
	return k.Namespace + "/" + k.Remote + "/" + sync
}

// Rendered is what every sync of every plan of a checkout applies.
type Rendered struct {
	Manifests map[Key]string
	// Failed lists the syncs that could not be rendered, each with why;
	// their manifests say so too, so a diff shows the failure.
	Failed []string
}

// RenderPlans renders every sync of plans, and each plan's notes.
func RenderPlans(ctx context.Context, r *Renderer, plans []Plan) *Rendered {
	out := &Rendered{Manifests: map[Key]string{}}
	for _, p := range plans {
		if len(p.Notes) > 0 {
			out.Manifests[Key{Namespace: p.Namespace, Remote: p.Remote}] = "# " + strings.Join(p.Notes, "\n# ") + "\n"
		}
		for i := range p.Syncs {
			key := Key{Namespace: p.Namespace, Remote: p.Remote, Sync: p.Syncs[i].Name}
			manifests, err := r.Render(ctx, &p.Syncs[i], p.KubeVersion)
			if err != nil {
				manifests = fmt.Sprintf("# render failed: %v\n", err)
				out.Failed = append(out.Failed, key.path()+": "+err.Error())
			}
			out.Manifests[key] = manifests
		}
	}
	return out
}

// Diff is how one rendering differs between two checkouts.
type Diff struct {
	Namespace string `json:"namespace"`
	Remote    string `json:"remote"`
	// Sync is empty for the plan's notes.
	Sync string `json:"sync,omitempty"`
	// Change is added, removed or changed.
	Change string `json:"change"`
	// Unified is the unified diff, base first.
	Unified string `json:"unified"`
}

// Compare returns, sorted by namespace, Remote and sync, every rendering
// that differs between base and head, as a unified diff.
func Compare(base, head *Rendered) []Diff {
	keys := slices.Collect(maps.Keys(head.Manifests))
	for k := range base.Manifests {
		if _, ok := head.Manifests[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b Key) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Remote, b.Remote), cmp.Compare(a.Sync, b.Sync))
	})
	var diffs []Diff
	for _, k := range keys {
		before, was := base.Manifests[k]
		after, is := head.Manifests[k]
		change := "changed"
		switch {
		case before == after && was == is:
			continue
		case !was:
			change = "added"
		case !is:
			change = "removed"
		}
		from, to := "base/"+k.path(), "head/"+k.path()
		if !was {
			from = "/dev/null"
		}
		if !is {
			to = "/dev/null"
		}
		unified, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{ // writes to memory: cannot fail
			A: lines(before), B: lines(after), FromFile: from, ToFile: to, Context: 3,
		})
		diffs = append(diffs, Diff{Namespace: k.Namespace, Remote: k.Remote, Sync: k.Sync, Change: change, Unified: unified})
	}
	return diffs
}

// lines splits text into lines for difflib, each ending in a newline; no
// text is no lines.
func lines(text string) []string {
	if text == "" {
		return nil
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	split := strings.SplitAfter(text, "\n")
	return split[:len(split)-1] // after the last newline: ""
}
