// Command fleet-agent runs in a downstream cluster: it enrols with the
// management cluster through its Upstreams, mirrors each ProxyAssemblage into
// a local Assemblage and expands that into Flux objects.
package main

import "github.com/fleeet-dev/fleeet/internal/runner"

func main() {
	runner.Main("fleet-agent", nil)
}
