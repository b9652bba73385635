// Command fleet-agent runs in a downstream cluster: it registers the cluster
// with each management namespace named by an Upstream, mirrors the plan it
// pulls into a local Assemblage, and expands each Assemblage into Flux
// objects, gated on cross-kind dependency readiness. With --push-only it does
// the last alone, for the Assemblages the fleet-manager pushes.
//
// `fleet-agent check` is the chart's helm test: it passes when every
// Upstream in the agent's namespace is Ready. `fleet-agent uninstall` is its
// pre-delete hook: it removes the plans of the namespaces the release created
// while the agent and Flux still run (internal/helmhooks).
package main

import (
	"context"
	"os"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleeet-dev/fleeet/internal/agent"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/helmhooks"
	"github.com/fleeet-dev/fleeet/internal/runner"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "check":
			helmhooks.Main("fleet-agent", os.Args[1:], helmhooks.Registered)
			return
		case "uninstall":
			helmhooks.Main("fleet-agent", os.Args[1:], helmhooks.Uninstall())
			return
		}
	}
	var o agent.Options
	pflag.IntVar(&o.Concurrent, "concurrent", 4, "Number of Assemblages and Upstreams reconciled at once.")
	pflag.DurationVar(&o.Heartbeat, "heartbeat-interval", agent.DefaultHeartbeat,
		"How often the agent renews its Lease in the management cluster; keep it under the manager's --offline-grace.")
	pflag.DurationVar(&o.CredentialLifetime, "credential-lifetime", credential.Lifetime,
		"How long each token the agent mints for its cluster's identity in the management cluster lives, from 10m to 24h; "+
			"it is renewed at 80%, so the rest is the longest management outage the agent rides out without recovery.")
	pflag.DurationVar(&o.FetchJitter, "fetch-jitter", 0,
		"Apply each new version of a sync, and so fetch it, after a delay of up to this long drawn per agent, "+
			"so a fleet's clusters do not all hit the git or chart server at once; 0 applies at once.")
	pflag.BoolVar(&o.AllowUnconfined, "allow-unconfined-syncs", false,
		"Run Upstreams and Assemblages that name no spec.serviceAccountName: Flux applies their syncs with its own identity "+
			"(usually cluster-admin) and bindings are read as the agent. Only for a cluster whose every tenant is fully trusted; "+
			"by default they are refused.")
	pflag.BoolVar(&o.PushOnly, "push-only", false,
		"Expand only the Assemblages the fleet-manager writes into this cluster through a kubeconfig (push mode): "+
			"no Upstream is read, no cluster registers and no plan is pulled, so the agent needs no access to Upstreams, and of Secrets only to those the manager delivers into the tenants' namespaces.")
	own := pflag.String("namespace", os.Getenv("POD_NAMESPACE"),
		"The agent's own namespace: the only one where it reads Upstreams and keeps their Secrets. "+
			"Empty means every namespace, which needs cluster-wide permissions.")
	tenants := pflag.StringSlice("watch-namespaces", nil,
		"Namespaces holding the Assemblages and Flux objects of the Upstreams' tenants (spec.assemblageNamespace). "+
			"Empty means every namespace, which needs cluster-wide permissions.")
	runner.Main(agent.Name, func(mgr ctrl.Manager) error {
		return agent.Setup(context.Background(), mgr, o)
	}, func(opts *ctrl.Options) { agent.Confine(opts, *own, *tenants) })
}
