// Command fleet-manager runs in the management cluster: it compiles Modules
// into ProxyAssemblages, rolls out new versions, drives push-mode Remotes and
// serves the admission webhooks.
package main

import "github.com/fleeet-dev/fleeet/internal/runner"

func main() {
	runner.Main("fleet-manager", nil)
}
