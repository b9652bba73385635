// Command fleet-manager runs in the management cluster: it compiles Modules
// into ProxyAssemblages, rolls out new versions, pushes plans to push-mode Remotes and tracks
// Remote health.
package main

import (
	"context"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleeet-dev/fleeet/internal/manager"
	"github.com/fleeet-dev/fleeet/internal/runner"
)

func main() {
	var o manager.Options
	pflag.DurationVar(&o.OfflineGrace, "offline-grace", 60*time.Second,
		"How long after its last heartbeat a pull Remote is marked Offline.")
	pflag.DurationVar(&o.PushTimeout, "push-timeout", 10*time.Second,
		"Timeout of each request to a push-mode Remote's cluster.")
	pflag.DurationVar(&o.PushPoll, "push-poll-interval", 10*time.Second,
		"How often a push-mode Remote's status is read while its syncs progress.")
	pflag.IntVar(&o.Concurrent, "concurrent", 4, "Number of objects each controller reconciles at once.")
	runner.Main(manager.Name, func(mgr ctrl.Manager) error {
		return manager.Setup(context.Background(), mgr, o)
	})
}
