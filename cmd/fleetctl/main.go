// Command fleetctl is the command line for fleeet. Installed as
// kubectl-fleet it also runs as the kubectl plugin `kubectl fleet`.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fleeet-dev/fleeet/internal/version"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "fleetctl",
		Short:         "Manage a fleeet fleet: tokens, status and why a sync is blocked",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the fleetctl version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.Version)
			return err
		},
	})
	return root
}
