package fleetctl

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/recovery"
)

func newReenrolCommand(s *session) *cobra.Command {
	return &cobra.Command{
		Use:   "reenrol REMOTE",
		Short: "Let a cluster that cannot recover by itself attach to its existing Remote again",
		Long: `For a cluster gone longer than the manager's --recovery-grace, or whose recovery key is lost
or was used by someone else. Generates a new recovery key, names its public half on the existing
Remote (` + fleeetv1.RecoveryKeyAnnotation + `, stamped ` + fleeetv1.ReenrolledAtAnnotation + ` so the grace counts
from now) and prints the private half with the command that hands it to the cluster's agent. The
agent then recovers through the manager's recovery endpoint as usual, which rotates the key again:
the printed key works once. Nothing is deleted, upstream or downstream; any key the cluster held
before stops working.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := s.client()
			if err != nil {
				return err
			}
			key, err := recovery.NewKey()
			if err != nil {
				return err
			}
			remote := &fleeetv1.Remote{}
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, remote); err != nil {
				return err
			}
			// Conditional on the Remote read, like the manager's own rotation.
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
				"resourceVersion": remote.ResourceVersion,
				"annotations": map[string]string{
					fleeetv1.RecoveryKeyAnnotation:  recovery.PublicKey(key),
					fleeetv1.ReenrolledAtAnnotation: time.Now().UTC().Format(time.RFC3339),
				},
			}})
			if err != nil {
				return err
			}
			if err := c.Patch(cmd.Context(), remote, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), `remote/%s: new recovery key named; hand its private half, once, to the cluster's agent:

  kubectl -n AGENT_NAMESPACE create secret generic UPSTREAM-credential --dry-run=client -o yaml \
    --from-literal=token=expired --from-literal=expiresAt=1970-01-01T00:00:00Z \
    --from-literal=%s=%s | kubectl apply -f -
  kubectl -n AGENT_NAMESPACE rollout restart deployment fleet-agent

(AGENT_NAMESPACE and UPSTREAM: the fleet-agent release's namespace and the Upstream's name, the
tenant namespace %s with the chart.) The Upstream needs spec.management.recoveryURL.
`, args[0], recovery.PrivateKeyKey, recovery.EncodePrivate(key), ns)
			return err
		},
	}
}
