package fleetctl

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
)

func newRolloutCommand(s *session) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "See and steer a Module's rollout: status, history, pause, resume, approve, undo",
		Long: `Like kubectl rollout, for a Module across the fleet. None writes the spec, so a GitOps tool applying
the Module from git undoes none of them: pause and resume set and remove the annotation
fleeet.dev/pause; approve and undo write an annotation naming the Module's current revision, so
neither can apply to a later version by accident. kubectl wait --for=condition=Ready (or RolledBack, RolloutPaused)
waits on the same conditions these commands report.`,
	}
	cmd.AddCommand(newRolloutStatusCommand(s), newRolloutHistoryCommand(s),
		newRolloutPauseCommand(s), newRolloutResumeCommand(s),
		newRolloutApproveCommand(s), newRolloutUndoCommand(s))
	return cmd
}

func newRolloutStatusCommand(s *session) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status MODULE",
		Short: "Where a Module's rollout stands, stage by stage",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, f, err := s.fleet(cmd.Context())
			if err != nil {
				return err
			}
			i := slices.IndexFunc(f.Modules, func(m fleeetv1.Module) bool { return m.Name == args[0] })
			if i < 0 {
				return fmt.Errorf("module %s not found in namespace %s", args[0], f.Namespace)
			}
			view := f.Rollout(&f.Modules[i])
			if done, err := printStructured(cmd.OutOrStdout(), output, view); done {
				return err
			}
			return printRollout(cmd.OutOrStdout(), view)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// printRollout writes v as fleetctl rollout status shows it.
func printRollout(out io.Writer, v fleetview.RolloutView) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "module/%s: %s (revision %s), %s\n", v.Module, v.Version, v.Revision, v.Strategy)
	fmt.Fprintf(w, "  state:   %s\n", v.State)
	if v.Paused != "" {
		fmt.Fprintf(w, "  paused:  %s\n", v.Paused)
	}
	if v.Holding != "" {
		fmt.Fprintf(w, "  holding: %s\n", v.Holding)
	}
	if v.VersionPolicy != "" {
		fmt.Fprintf(w, "  policy:  %s\n", v.VersionPolicy)
	}
	fmt.Fprintln(w, "STAGE\tREMOTES\tUPDATED\tREADY\tOFFLINE\tAPPROVAL\t")
	for _, st := range v.Stages {
		name := st.Name
		if st.Track != "" {
			name += " (track " + st.Track + ")"
		}
		if st.Current {
			name += " *"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t\n", name, st.Remotes, st.Updated, st.Ready, st.Offline, st.Approval)
	}
	return w.Flush()
}

func newRolloutHistoryCommand(s *session) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "history MODULE",
		Short: "The versions that were Ready across the fleet or rolled back, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := s.module(cmd, args[0])
			if err != nil {
				return err
			}
			if done, err := printStructured(cmd.OutOrStdout(), output, m.Status.History); done {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "REVISION\tVERSION\tOUTCOME\tTIME\t")
			for _, h := range m.Status.History {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t\n", h.Revision, h.Version, h.Outcome, h.Time.UTC().Format(time.RFC3339))
			}
			return w.Flush()
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func newRolloutPauseCommand(s *session) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "pause MODULE",
		Short: "Stop Remotes from starting to move to a new version; those moving finish",
		Long: `Sets the annotation fleeet.dev/pause to the time, and the reason if given, so the pause holds
while a GitOps tool keeps applying the Module's spec from git. fleetctl rollout resume removes it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			const reasonMax = fleeetv1.PauseAnnotationMax - len("2006-01-02T15:04:05Z: ")
			if len(reason) > reasonMax || strings.ContainsFunc(reason, func(r rune) bool { return r < ' ' || r > '~' }) {
				return fmt.Errorf("--reason: at most %d printable ASCII characters (it goes into the annotation %s)", reasonMax, fleeetv1.PauseAnnotation)
			}
			note := time.Now().UTC().Format(time.RFC3339)
			if reason != "" {
				note += ": " + reason
			}
			m, err := s.rollingModule(cmd, args[0], "paused")
			if err != nil {
				return err
			}
			if err := s.patch(cmd, m, annotation(fleeetv1.PauseAnnotation, note)); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "module/%s paused (%s: %s)\n", m.Name, fleeetv1.PauseAnnotation, note)
			return err
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept in the annotation and shown by fleetctl rollout status")
	return cmd
}

func newRolloutResumeCommand(s *session) *cobra.Command {
	return &cobra.Command{
		Use:   "resume MODULE",
		Short: "Let a rollout paused by fleetctl rollout pause go on",
		Long: `Removes the annotation fleeet.dev/pause. A pause declared in the spec (spec.rollout.paused) stays:
lift it where the spec is kept, in git.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := s.rollingModule(cmd, args[0], "paused")
			if err != nil {
				return err
			}
			if err := s.patch(cmd, m, annotation(fleeetv1.PauseAnnotation, nil)); err != nil {
				return err
			}
			out := fmt.Sprintf("module/%s resumed\n", m.Name)
			if m.Spec.Rollout.Paused {
				out = fmt.Sprintf("module/%s: removed %s, but spec.rollout.paused still pauses it; set it to false where the spec is kept\n",
					m.Name, fleeetv1.PauseAnnotation)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), out)
			return err
		},
	}
}

func newRolloutApproveCommand(s *session) *cobra.Command {
	return &cobra.Command{
		Use:   "approve MODULE [STAGE]",
		Short: "Give a stage's manual approval, so the next stage starts (the stage holding now by default)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := s.module(cmd, args[0])
			if err != nil {
				return err
			}
			revision := compile.ModuleRevision(m)
			ro := m.Status.Rollout
			if ro == nil || ro.Revision != revision {
				return fmt.Errorf("module %s: the manager has not planned revision %s yet; try again shortly", m.Name, revision)
			}
			stage, err := awaitingApproval(m, ro)
			if len(args) == 2 {
				stage, err = args[1], nil
			}
			if err != nil {
				return err
			}
			i := slices.IndexFunc(m.Spec.Rollout.Stages, func(st fleeetv1.RolloutStage) bool { return st.Name == stage })
			switch {
			case i < 0:
				return fmt.Errorf("module %s has no stage %q", m.Name, stage)
			case m.Spec.Rollout.Stages[i].Approval != fleeetv1.ManualApproval:
				return fmt.Errorf("stage %s of module %s needs no approval", stage, m.Name)
			case slices.Contains(ro.Approved, stage):
				return fmt.Errorf("stage %s of module %s is approved already", stage, m.Name)
			}
			if err := s.patch(cmd, m, annotation(fleeetv1.ApproveAnnotation, revision+"/"+stage)); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "module/%s: stage %s of %s approved\n", m.Name, stage, compile.Version(&m.Spec.Sync))
			return err
		},
	}
}

// awaitingApproval is the stage approve gives its approval to when none
// is named: the one stage in progress, in any track, that needs approval
// and has none; else the stage in progress, for approve to say why it
// needs none.
func awaitingApproval(m *fleeetv1.Module, ro *fleeetv1.RolloutStatus) (string, error) {
	var waiting []string
	for _, t := range append([]fleeetv1.TrackStatus{{Stage: ro.Stage}}, ro.Tracks...) {
		i := slices.IndexFunc(m.Spec.Rollout.Stages, func(st fleeetv1.RolloutStage) bool { return st.Name == t.Stage })
		if i >= 0 && m.Spec.Rollout.Stages[i].Approval == fleeetv1.ManualApproval && !slices.Contains(ro.Approved, t.Stage) &&
			!slices.Contains(waiting, t.Stage) {
			waiting = append(waiting, t.Stage)
		}
	}
	switch len(waiting) {
	case 0:
		return ro.Stage, nil
	case 1:
		return waiting[0], nil
	}
	return "", fmt.Errorf("module %s: stages %s await approval, one in each track; name the one to approve", m.Name, strings.Join(waiting, ", "))
}

func newRolloutUndoCommand(s *session) *cobra.Command {
	return &cobra.Command{
		Use:   "undo MODULE",
		Short: "Roll the current version back now to the last version that was Ready across the fleet",
		Long: `Every Remote on the current version goes back to the newest Succeeded version of
fleetctl rollout history, at once, and the Module holds there (condition RolledBack) until its sync
changes. Remotes that never moved keep what they hold.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := s.rollingModule(cmd, args[0], "undone; set the sync back instead")
			if err != nil {
				return err
			}
			revision := compile.ModuleRevision(m)
			i := slices.IndexFunc(m.Status.History, func(h fleeetv1.RolloutRecord) bool {
				return h.Outcome == fleeetv1.RolloutSucceeded && h.Revision != revision
			})
			if i < 0 {
				return fmt.Errorf("module %s: no earlier version was Ready across the fleet; nothing to roll back to", m.Name)
			}
			if err := s.patch(cmd, m, annotation(fleeetv1.UndoAnnotation, revision)); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "module/%s: rolling %s back to %s\n", m.Name,
				compile.Version(&m.Spec.Sync), m.Status.History[i].Version)
			return err
		},
	}
}

// annotation is a merge patch setting an annotation, or removing it when
// value is nil.
func annotation(key string, value any) map[string]any {
	return map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}}
}

// module reads the named Module of the session's namespace.
func (s *session) module(cmd *cobra.Command, name string) (*fleeetv1.Module, error) {
	c, ns, err := s.client()
	if err != nil {
		return nil, err
	}
	m := &fleeetv1.Module{}
	if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		return nil, err
	}
	return m, nil
}

// rollingModule reads the named Module, refusing one that does not roll out
// with RollingUpdate: it cannot be what the caller is doing.
func (s *session) rollingModule(cmd *cobra.Command, name, doing string) (*fleeetv1.Module, error) {
	m, err := s.module(cmd, name)
	if err == nil && m.Spec.Rollout.Strategy != fleeetv1.RollingUpdateStrategy {
		err = fmt.Errorf("module %s rolls out %s: only a RollingUpdate can be %s", m.Name, m.Spec.Rollout.Strategy, doing)
	}
	return m, err
}

// patch merge-patches obj.
func (s *session) patch(cmd *cobra.Command, obj client.Object, patch map[string]any) error {
	c, _, err := s.client()
	if err != nil {
		return err
	}
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	return c.Patch(cmd.Context(), obj, client.RawPatch(types.MergePatchType, raw))
}
