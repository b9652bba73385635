package fleetctl

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func newRetryCommand(s *session) *cobra.Command {
	return &cobra.Command{
		Use:   "retry REMOTE",
		Short: "Have a cluster try its syncs again, after Flux gave up on one",
		Long: `Writes a new token into the Remote's ` + fleeetv1.RetryAnnotation + ` annotation. The manager puts it
into the cluster's plan, and the cluster's agent asks Flux to reconcile every sync at once and to
reset the failure counts of HelmReleases that ran out of retries (as flux reconcile --reset would).
No access to the cluster itself is needed.

Most failures need no retry: a kustomize sync checks again every minute, a HelmRelease retries a
failed install or upgrade (3 times unless the sync says otherwise) and rolls a failed upgrade
back, and a new version or new values are tried afresh. Use retry once the cause of a failure is
mended outside the sync (a Secret created, capacity added) and a HelmRelease has used up its
retries at the version it still holds.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, ns, err := s.client()
			if err != nil {
				return err
			}
			token := time.Now().UTC().Format(time.RFC3339Nano)
			remote := &fleeetv1.Remote{}
			remote.Namespace, remote.Name = ns, args[0]
			if err := s.patch(cmd, remote, annotation(fleeetv1.RetryAnnotation, token)); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "remote/%s: retry requested at %s\n", args[0], token)
			return err
		},
	}
}
