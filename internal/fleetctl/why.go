package fleetctl

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
)

func newWhyCommand(s *session) *cobra.Command {
	var output, remote string
	cmd := &cobra.Command{
		Use:   "why MODULE --remote REMOTE",
		Short: "Why a Module is where it is on one Remote: selection, rollout, plan, cluster, dependencies",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, f, err := s.fleet(cmd.Context())
			if err != nil {
				return err
			}
			ns := f.Namespace
			i := slices.IndexFunc(f.Modules, func(m fleeetv1.Module) bool { return m.Name == args[0] })
			if i < 0 {
				return fmt.Errorf("no Module %s in namespace %s", args[0], ns)
			}
			j := slices.IndexFunc(f.Remotes, func(r fleeetv1.Remote) bool { return r.Name == remote })
			if j < 0 {
				return fmt.Errorf("no Remote %q in namespace %s (--remote)", remote, ns)
			}
			view := f.Why(&f.Modules[i], &f.Remotes[j])
			if view.Warning, view.PolicyDenial, err = fleetview.LastWarnings(cmd.Context(), c, &f.Modules[i], remote); err != nil {
				return err
			}
			if done, err := printStructured(cmd.OutOrStdout(), output, view); done {
				return err
			}
			view.Print(cmd.OutOrStdout(), ns)
			return nil
		},
	}
	cmd.Flags().StringVar(&remote, "remote", "", "The Remote to explain (required)")
	_ = cmd.MarkFlagRequired("remote")
	addOutputFlag(cmd, &output)
	return cmd
}
