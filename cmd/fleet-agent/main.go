// Command fleet-agent runs in a downstream cluster: it expands each
// Assemblage into Flux objects, gated on cross-kind dependency readiness.
package main

import (
	"context"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/runner"
)

func main() {
	var o agent.Options
	pflag.IntVar(&o.Concurrent, "concurrent", 4, "Number of Assemblages reconciled at once.")
	runner.Main(agent.Name, func(mgr ctrl.Manager) error {
		return agent.Setup(context.Background(), mgr, o)
	})
}
