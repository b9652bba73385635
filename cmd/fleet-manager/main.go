// Command fleet-manager runs in the management cluster: it compiles Modules
// into ProxyAssemblages, rolls out new versions, pushes plans to push-mode
// Remotes, registers pull-mode clusters through RegistrationTokens and tracks
// Remote health. It serves the admission webhooks that guard registrations.
//
// `fleet-manager dashboard --in-cluster` runs the web dashboard instead —
// fleetctl's (internal/dashboard), shipped in this image for the chart's
// dashboard Deployment.
//
// `fleet-manager check --namespace <not a tenant>` is the chart's helm test:
// it passes when the admission webhook refuses a Module there
// (internal/helmhooks).
package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/fleeet-dev/fleeet/internal/controllers/manager/content"
	"github.com/fleeet-dev/fleeet/internal/dashboard"
	"github.com/fleeet-dev/fleeet/internal/helmhooks"
	"github.com/fleeet-dev/fleeet/internal/manager"
	"github.com/fleeet-dev/fleeet/internal/recovery"
	"github.com/fleeet-dev/fleeet/internal/runner"
)

// commands are the programs fleet-manager runs besides the controller
// manager, by its first argument, each given the arguments from that one
// on. Any other first argument, a flag or none, runs the manager.
var commands = map[string]func(args []string){
	"dashboard": runDashboard,
	"check":     runCheck,
}

func main() {
	if len(os.Args) > 1 {
		if run, ok := commands[os.Args[1]]; ok {
			run(os.Args[1:])
			return
		}
	}
	runManager()
}

// runManager runs the controller manager with the flags of the command
// line, until SIGTERM or SIGINT.
func runManager() {
	var o manager.Options
	var caFile, recoveryCAFile string
	var hook webhook.Options
	pflag.DurationVar(&o.OfflineGrace, "offline-grace", 60*time.Second,
		"How long after its last heartbeat (or the manager's own last failure to reach the API, when later) a pull Remote is marked Offline.")
	pflag.DurationVar(&o.ContentGrace, "content-grace", content.DefaultGrace,
		"How long a CompiledSync no plan names is kept before it is deleted.")
	pflag.DurationVar(&o.PushTimeout, "push-timeout", 10*time.Second,
		"Timeout of each request to a push-mode Remote's cluster.")
	pflag.DurationVar(&o.PushPoll, "push-poll-interval", 10*time.Second,
		"How often a push-mode Remote's status is read while its syncs progress.")
	o.Kubeconfig.BindFlags(pflag.CommandLine)
	o.SourceNetworks.BindFlags(pflag.CommandLine, manager.FlagSourceNetworks, "the IP addresses in Modules' and BootstrapModules' source URLs", false)
	pflag.StringVar(&o.InventoryServiceAccountName, "inventory-service-account-name", "",
		"spec.serviceAccountName of Remotes enrolled from Cluster API Clusters and ClusterProfiles without the fleeet.dev/service-account-name annotation.")
	pflag.StringVar(&o.InventoryAccessProvider, "inventory-access-provider", "secretreader",
		"ClusterProfile access provider whose server and CA the manager uses, with the token of the Secret named after the profile and labelled fleeet.dev/cluster-profile=<profile>.")
	pflag.IntVar(&o.Concurrent, "concurrent", 4, "Number of objects each controller reconciles at once.")
	pflag.StringVar(&o.Management.URL, "management-url", "",
		"URL of this cluster's Kubernetes API as downstream agents reach it; written into RegistrationToken Secrets.")
	pflag.StringVar(&o.AgentChart, "agent-chart", "",
		"The fleet-agent chart released with this manager, as helm install takes it (oci://…/fleet-agent --version X); written into RegistrationToken Secrets for fleetctl token create to print.")
	pflag.StringVar(&caFile, "management-ca-file", "",
		"PEM file of the CA that signs the API's serving certificate, for agents; written into RegistrationToken Secrets.")
	pflag.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"),
		"The manager's namespace: ConfigMaps labelled fleeet.dev/policy=true there hold user Rego policies.")
	pflag.IntVar(&o.MaxPlanBytes, "max-plan-bytes", manager.DefaultMaxPlanBytes,
		"Largest compiled ProxyAssemblage spec, in bytes, the admission policy lets through.")
	pflag.IntVar(&o.MaxObjectNodes, "max-object-nodes", manager.DefaultMaxObjectNodes,
		"Most JSON nodes (objects, arrays, strings, numbers, booleans, nulls) an object written to a fleeet kind may hold outside metadata.managedFields, which get twice as many; the webhook refuses more before decoding the review. Plans and CompiledSyncs may hold --max-plan-bytes more.")
	pflag.IntVar(&o.MaxMoving, "max-moving", 0,
		"Most Remotes moving to a new version at once across every Module's RollingUpdate; 0 for no cap.")
	pflag.StringVar(&o.PrometheusURL, "prometheus-url", "",
		"Base URL of the Prometheus-compatible server (its HTTP API) that the checks of rollout stages ask; empty for none, which holds every stage with a check.")
	pflag.BoolVar(&o.AdmissionOnly, "admission-only", false,
		"Serve the admission webhooks only, running no controller: for fleetctl restore on a rebuilt management cluster.")
	pflag.IntVar(&hook.Port, "webhook-port", 9443, "Port the admission webhooks are served on.")
	pflag.StringVar(&hook.Host, "webhook-host", "", "Address the admission webhooks bind to; empty means all.")
	pflag.StringVar(&hook.CertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs",
		"Directory holding the webhook serving certificate as tls.crt and tls.key.")
	pflag.StringVar(&o.Recovery.BindAddress, "recovery-bind-address", "",
		"Address (host:port) of the endpoint where pull clusters whose credential the API rejects get a new one by proving their recovery key; empty serves none.")
	pflag.StringVar(&o.Recovery.CertDir, "recovery-cert-dir", "/tmp/fleet-manager-recovery/serving-certs",
		"Directory holding the recovery endpoint's serving certificate as tls.crt and tls.key.")
	pflag.DurationVar(&o.Recovery.Grace, "recovery-grace", recovery.DefaultGrace,
		"How long after its last heartbeat a cluster may still recover by itself; beyond it, fleetctl reenrol.")
	pflag.StringVar(&o.Management.RecoveryURL, "recovery-url", "",
		"URL of the recovery endpoint as downstream agents reach it; written into RegistrationToken Secrets.")
	pflag.StringVar(&recoveryCAFile, "recovery-ca-file", "",
		"PEM file of the CA that signs the recovery endpoint's serving certificate, for agents; written into RegistrationToken Secrets.")
	pflag.StringVar(&o.Shard.Identity, "shard-identity", shardIdentity(),
		"This replica's name among the shard members, unique among the replicas; its membership Lease is fleet-manager-shard-<identity> in --namespace. Defaults to the host name (the pod's name) and a random suffix, so two processes on one host never share it.")
	pflag.DurationVar(&o.Shard.LeaseDuration, "shard-lease-duration", 15*time.Second,
		"How long a replica's membership Lease stays live after its last renewal (renewed every third of it): a crashed replica's Remotes move to the others within this plus a third. 0 runs every per-Remote controller on the leader alone.")
	runner.Main(manager.Name, func(mgr ctrl.Manager) error {
		if o.MaxPlanBytes < 1024 {
			return fmt.Errorf("--max-plan-bytes=%d: want at least 1024 bytes, or leave it at the default %d", o.MaxPlanBytes, manager.DefaultMaxPlanBytes)
		}
		if o.MaxObjectNodes < 1000 {
			return fmt.Errorf("--max-object-nodes=%d: want at least 1000 nodes, or leave it at the default %d", o.MaxObjectNodes, manager.DefaultMaxObjectNodes)
		}
		if caFile != "" {
			ca, err := os.ReadFile(caFile)
			if err != nil {
				return fmt.Errorf("--management-ca-file: %w", err)
			}
			o.Management.CABundle = ca
		}
		if recoveryCAFile != "" {
			ca, err := os.ReadFile(recoveryCAFile)
			if err != nil {
				return fmt.Errorf("--recovery-ca-file: %w", err)
			}
			o.Management.RecoveryCABundle = ca
		}
		return manager.Setup(context.Background(), mgr, o)
	}, manager.Configure, func(opts *ctrl.Options) { opts.WebhookServer = webhook.NewServer(hook) })
}

// runDashboard runs args, which start with "dashboard", as fleetctl runs
// them: the same command under a root named fleetctl with kubectl's
// kubeconfig flags, so its flags, help and errors read the same. It exits 1
// when the command fails, which cobra has printed.
func runDashboard(args []string) {
	kube := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{Use: "fleetctl", SilenceUsage: true}
	kube.AddFlags(root.PersistentFlags())
	root.AddCommand(dashboard.NewCommand(kube))
	root.SetArgs(args)
	if err := root.ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}

// runCheck runs args, which start with "check", as the chart's helm test:
// it passes when the admission webhook refuses a Module in a namespace that
// is not a tenant's.
func runCheck(args []string) {
	helmhooks.Main("fleet-manager", args, helmhooks.Admission)
}

// shardIdentity is the default --shard-identity: the host name, which is the
// pod's name, and a random suffix, as client-go's leader election names a
// candidate, so that processes sharing a host name (hostNetwork pods, tests)
// are still separate members.
func shardIdentity() string {
	host, _ := os.Hostname()
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix) // crypto/rand.Read never fails
	return fmt.Sprintf("%s-%x", host, suffix)
}
