// Package fleetctl is the fleetctl command line: registration tokens, the
// fleet at a glance, why one Module is where it is on one Remote, retries,
// revocation, rollouts (status, history, pause, resume, approve, undo), a
// preview of a change (diff), Modules imported from Flux objects (import),
// backup and restore of the state no git holds and the web dashboard
// (internal/dashboard). It
// talks to the management cluster like kubectl does (the same kubeconfig,
// context and namespace flags), and reads the fleet through
// internal/fleetview, as the dashboard does.
package fleetctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/fleeet-dev/fleeet/internal/dashboard"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
	"github.com/fleeet-dev/fleeet/internal/version"
)

// NewCommand returns the fleetctl root command. Installed as kubectl-fleet,
// the binary also runs as `kubectl fleet`.
func NewCommand() *cobra.Command {
	kube := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:           "fleetctl",
		Short:         "Manage a fleeet fleet: tokens, status, why a sync is where it is, rollouts, revocation",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	kube.AddFlags(root.PersistentFlags())
	s := &session{kube: kube}
	root.AddCommand(
		&cobra.Command{
			Use:   "version",
			Short: "Print the fleetctl version",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), version.Version)
				return err
			},
		},
		newTokenCommand(s), newStatusCommand(s), newWhyCommand(s), newRetryCommand(s), newRevokeCommand(s), newReenrolCommand(s),
		newRolloutCommand(s), newDiffCommand(s), newImportCommand(s), newBackupCommand(s), newRestoreCommand(s), dashboard.NewCommand(kube),
	)
	return root
}

// session connects a command to the management cluster named by the
// kubeconfig flags.
type session struct {
	kube *genericclioptions.ConfigFlags
}

// namespace returns the namespace the flags or the kubeconfig context
// select.
func (s *session) namespace() (string, error) {
	ns, _, err := s.kube.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// client returns a client of the management cluster and the namespace the
// flags or the kubeconfig context select.
func (s *session) client() (client.Client, string, error) {
	cfg, err := s.kube.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	ns, err := s.namespace()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: fleetview.Scheme})
	return c, ns, err
}

// fleet connects to the management cluster and reads the selected
// namespace's Modules, Remotes and ProxyAssemblages.
func (s *session) fleet(ctx context.Context) (client.Client, *fleetview.Fleet, error) {
	c, namespace, err := s.client()
	if err != nil {
		return nil, nil, err
	}
	f, err := fleetview.Read(ctx, c, namespace)
	return c, f, err
}

// addOutputFlag registers -o/--output: empty for the human view, or yaml
// or json.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "", "Output format: yaml or json; empty for a table")
}

// printStructured writes v as YAML or JSON, or reports false for the human
// view.
func printStructured(w io.Writer, output string, v any) (bool, error) {
	switch output {
	case "":
		return false, nil
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return true, enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = w.Write(b)
		return true, err
	}
	return true, fmt.Errorf("--output %q: want yaml or json", output)
}

// show writes v as YAML or JSON when output asks, else as its human view.
func show(w io.Writer, output string, v interface{ print(io.Writer) }) error {
	if done, err := printStructured(w, output, v); done {
		return err
	}
	v.print(w)
	return nil
}

// colourful reports whether w is a terminal that wants colour.
func colourful(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && os.Getenv("NO_COLOR") == "" && term.IsTerminal(int(f.Fd()))
}
