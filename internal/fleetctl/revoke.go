package fleetctl

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func newRevokeCommand(s *session) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "revoke REMOTE",
		Short: "Revoke a cluster: delete its Remote, so its identity and every token it holds stop working",
		Long: `Deletes the Remote. The manager then deletes the cluster's ServiceAccount, Role, Lease and
credential Secret before the Remote goes, so every token the cluster holds stops authenticating at
once. Nothing is deleted in the cluster itself: its workloads keep running, and its agent reports
Registered=False (Revoked).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := s.client()
			if err != nil {
				return err
			}
			remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: args[0]}}
			if err := c.Delete(cmd.Context(), remote); err != nil {
				return err
			}
			err = wait.PollUntilContextTimeout(cmd.Context(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(remote), remote)
				return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
			})
			if err != nil {
				return fmt.Errorf("remote %s/%s deleted, but the manager has not finished revoking it: %w", ns, args[0], err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "remote/%s revoked: identity %s deleted\n", args[0], fleeetv1.RemoteIdentityName(args[0]))
			return err
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "How long to wait for the manager to revoke the identity")
	return cmd
}
