// Package helmhooks holds what the charts' Helm hooks run inside the
// cluster, with identities the charts grant: `helm test` checks that prove a
// component works — not merely that its Pod is up — and the agent's
// pre-delete clean-up.
package helmhooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/runner"
)

// Job is one hook: its own flags, and a step that passes (nil) or says what
// is not done yet; Main retries it until it passes or time runs out.
type Job struct {
	// Flags adds the job's own flags, if any.
	Flags func(*pflag.FlagSet)
	// Run does or checks the job's work once, in namespace (the release's).
	Run func(ctx context.Context, c client.Client, namespace string) error
}

// Main runs job, named by args[0] (`fleet-manager check`, `fleet-agent
// uninstall`), against the cluster the Pod runs in (or $KUBECONFIG's), and
// exits 0 when it passes within --timeout, or 1 saying why it did not.
func Main(binary string, args []string, job Job) {
	name := binary + " " + args[0]
	fs := pflag.NewFlagSet(name, pflag.ExitOnError)
	namespace := fs.String("namespace", os.Getenv("POD_NAMESPACE"), "The release's namespace.")
	timeout := fs.Duration("timeout", 2*time.Minute, "How long the job may take.")
	if job.Flags != nil {
		job.Flags(fs)
	}
	_ = fs.Parse(args[1:])
	if err := run(*namespace, *timeout, job.Run); err != nil {
		fmt.Fprintf(os.Stderr, "%s failed: %v\n", name, err)
		os.Exit(1)
	}
	fmt.Printf("%s passed\n", name)
}

func run(namespace string, timeout time.Duration, step func(context.Context, client.Client, string) error) error {
	if namespace == "" {
		return errors.New("--namespace: not set, and POD_NAMESPACE is empty")
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	scheme, err := runner.NewScheme()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	_ = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		last = step(ctx, c, namespace)
		return last == nil, nil
	})
	if last != nil {
		return fmt.Errorf("after %s: %w", timeout, last)
	}
	return nil
}

// notTenantMessage is how the built-in tenant policy refuses a fleeet
// object outside tenant namespaces.
const notTenantMessage = "is not a tenant namespace"

// Admission is the manager chart's `helm test`: `fleet-manager check
// --namespace <no tenant namespace>`.
var Admission = Job{Run: admission}

// admission asks the API server for a dry-run create of a valid Module in
// namespace, which must be no tenant namespace, and passes only when
// fleeet's admission webhook refused it for that: the API server reaches
// the webhook, trusts its certificate, and the webhook evaluates policies.
// A dry run stores nothing.
func admission(ctx context.Context, c client.Client, namespace string) error {
	m := &fleeetv1.Module{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "fleeet-selfcheck-"},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Sync: fleeetv1.SyncSpec{
			Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/selfcheck.git", Tag: "v1.0.0"}},
			Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./"}},
		}}},
	}
	err := c.Create(ctx, m, client.DryRunAll)
	switch {
	case err == nil:
		return fmt.Errorf("the API server accepted a Module in namespace %s, which is no tenant namespace: "+
			"fleeet's admission webhook does not judge Module writes there", namespace)
	case !strings.Contains(err.Error(), notTenantMessage):
		return fmt.Errorf("a Module in namespace %s was refused, but not by fleeet's tenant policy: %w", namespace, err)
	}
	return nil
}

// Registered is the agent chart's `helm test`: `fleet-agent check`.
var Registered = Job{Run: registered}

// registered passes when namespace holds at least one Upstream and every
// one is Ready: registered with its management cluster, connected, and
// its plan applied.
func registered(ctx context.Context, c client.Client, namespace string) error {
	list := &fleeetv1.UpstreamList{}
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return err
	}
	if len(list.Items) == 0 {
		return fmt.Errorf("no Upstream in namespace %s", namespace)
	}
	var problems []string
	for _, up := range list.Items {
		if apimeta.IsStatusConditionTrue(up.Status.Conditions, fleeetv1.ReadyCondition) {
			continue
		}
		problem := fmt.Sprintf("Upstream %s is not Ready", up.Name)
		for _, typ := range []string{fleeetv1.RegisteredCondition, fleeetv1.ReadyCondition} {
			if c := apimeta.FindStatusCondition(up.Status.Conditions, typ); c != nil {
				problem += fmt.Sprintf("; %s=%s %s: %s", typ, c.Status, c.Reason, c.Message)
			}
		}
		problems = append(problems, problem)
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// Uninstall is the agent chart's pre-delete hook: `fleet-agent uninstall
// --tenant-namespaces a,b [--keep-workloads]`, for the release's tenant
// namespaces: those it created and is about to delete, or, with
// --keep-workloads, existing ones whose workloads stay.
func Uninstall() Job {
	var tenants []string
	var keep bool
	return Job{
		Flags: func(fs *pflag.FlagSet) {
			fs.StringSliceVar(&tenants, "tenant-namespaces", nil, "The downstream namespaces whose Assemblages go.")
			fs.BoolVar(&keep, "keep-workloads", false, "Leave what the Assemblages' syncs applied running (the chart sets it with createNamespaces=false).")
		},
		Run: func(ctx context.Context, c client.Client, namespace string) error {
			return uninstall(ctx, c, namespace, tenants, keep)
		},
	}
}

// orphan is the patch that marks an Assemblage fleeetv1.OrphanAnnotation.
var orphan = client.RawPatch(types.MergePatchType,
	[]byte(`{"metadata":{"annotations":{"`+fleeetv1.OrphanAnnotation+`":"true"}}}`))

// uninstall deletes the release's Upstreams, so the agent stops mirroring
// plans into Assemblages, then every Assemblage in tenants, and passes once
// they are gone: the agent, still running, removes their Flux objects, and
// Flux's controllers, still running, remove what those applied, or with
// keep, only let the Flux objects go (each Assemblage is marked
// fleeetv1.OrphanAnnotation first). Once the agent and Flux are deleted
// nothing would, and the Assemblages and Flux objects would keep their
// finalizers for ever, a namespace deleted later with them.
func uninstall(ctx context.Context, c client.Client, namespace string, tenants []string, keep bool) error {
	if err := c.DeleteAllOf(ctx, &fleeetv1.Upstream{}, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("deleting the Upstreams: %w", err)
	}
	var left []string
	for _, ns := range tenants {
		list := &fleeetv1.AssemblageList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, asm := range list.Items {
			if keep && asm.Annotations[fleeetv1.OrphanAnnotation] != "true" {
				if err := c.Patch(ctx, &asm, orphan); client.IgnoreNotFound(err) != nil {
					return fmt.Errorf("marking Assemblage %s/%s to leave its workloads: %w", ns, asm.Name, err)
				}
			}
			if asm.DeletionTimestamp.IsZero() {
				if err := c.Delete(ctx, &asm); client.IgnoreNotFound(err) != nil {
					return err
				}
			}
			msg := ns + "/" + asm.Name
			if ready := apimeta.FindStatusCondition(asm.Status.Conditions, fleeetv1.ReadyCondition); ready != nil {
				msg += ": " + ready.Message
			}
			left = append(left, msg)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("waiting for the agent to remove the Flux objects of Assemblages %s", strings.Join(left, "; "))
	}
	return nil
}
