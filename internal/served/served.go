// Package served sets up controllers of kinds a cluster may come to serve
// only after the process started: Flux's, installed after the agent, and
// the inventories' (Cluster API, ClusterProfile), installed after the
// manager. A controller watching a kind that is not served never syncs
// its cache, and controller-runtime stops the process at the sync timeout,
// so the process would crash-loop until the CRDs came; waiting for them
// instead keeps everything else it does running.
package served

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// When runs setup now when missing reports nothing, or else, from a
// runnable of mgr (on the leader), once it does, asking every poll; what
// names the kinds in the log. Each ask is a discovery request or two, made
// for as long as the kinds stay missing, so poll trades how soon they are
// seen against that standing cost. missing lists what is not served yet; an
// error from it is logged and asked again. An error from setup stops mgr,
// as it would at start.
func When(mgr ctrl.Manager, what string, poll time.Duration, missing func() ([]string, error), setup func() error) error {
	absent, err := missing()
	if err != nil {
		return err
	}
	if len(absent) == 0 {
		return setup()
	}
	log := mgr.GetLogger().WithName("served")
	log.Info("Not served yet; set up once they are", "kinds", what, "missing", absent)
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		tick := time.NewTicker(poll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			absent, err := missing()
			if err != nil {
				log.Error(err, "Asking whether they are served; asking again", "kinds", what)
				continue
			}
			if len(absent) == 0 {
				log.Info("Served now; setting up", "kinds", what)
				return setup()
			}
		}
	}))
}
