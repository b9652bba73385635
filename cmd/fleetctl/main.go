// Command fleetctl is the command line for fleeet. Installed as
// kubectl-fleet it also runs as the kubectl plugin `kubectl fleet`.
package main

import (
	"os"

	"github.com/fleeet-dev/fleeet/internal/fleetctl"
)

func main() {
	if err := fleetctl.NewCommand().Execute(); err != nil {
		os.Exit(fleetctl.ExitCode(err))
	}
}
