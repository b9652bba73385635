// Command fleet-agent runs in a downstream cluster: it enrols with the
// management cluster through its Upstreams, mirrors each ProxyAssemblage into
// a local Assemblage and expands that into Flux objects.
package main

import (
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleeet-dev/fleeet/internal/controllers/assemblage"
	"github.com/fleeet-dev/fleeet/internal/runner"
)

const name = "fleet-agent"

func main() {
	concurrent := pflag.Int("concurrent", 4, "Number of Assemblages reconciled at once.")
	runner.Main(name, func(mgr ctrl.Manager) error {
		return (&assemblage.Reconciler{
			Client:                  mgr.GetClient(),
			APIReader:               mgr.GetAPIReader(),
			Recorder:                mgr.GetEventRecorder(name),
			FieldOwner:              name,
			MaxConcurrentReconciles: *concurrent,
		}).SetupWithManager(mgr)
	})
}
