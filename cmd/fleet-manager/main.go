// Command fleet-manager runs in the management cluster: it compiles Modules
// into ProxyAssemblages, rolls out new versions and tracks Remote health.
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
	runner.Main(manager.Name, func(mgr ctrl.Manager) error {
		return manager.Setup(context.Background(), mgr, o)
	})
}
