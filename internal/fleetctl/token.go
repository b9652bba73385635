package fleetctl

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
)

type tokenOptions struct {
	ttl         time.Duration
	labels      map[string]string
	freeKeys    []string
	max         int32
	valuesFile  string
	clusterName string
	chart       string
	timeout     time.Duration
}

func newTokenCommand(s *session) *cobra.Command {
	token := &cobra.Command{Use: "token", Short: "Registration tokens that register clusters"}
	var o tokenOptions
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a RegistrationToken and print the helm command that enrols a cluster with it",
		Long: `Creates a RegistrationToken in the namespace, waits for the manager to issue it, and prints
the exact helm install command for fleet-agent. Its one value is the enrolment string: the
management API's URL, the CA that signs it, the tenant namespace and the bearer token, in one
opaque string as secret as the token. With --values-file the string goes into that file,
readable by you only, and the command refers to it; otherwise it is on the command line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := s.client()
			if err != nil {
				return err
			}
			values, chart, err := createToken(cmd.Context(), c, ns, args[0], o)
			if err != nil {
				return err
			}
			if o.chart == "" {
				o.chart = cmp.Or(chart, "charts/fleet-agent")
			}
			return printInstall(cmd, values, o)
		},
	}
	create.Flags().DurationVar(&o.ttl, "ttl", time.Hour, "How long the token can be used")
	create.Flags().StringToStringVar(&o.labels, "labels", nil, "Labels set on every Remote registered with the token (k=v,…)")
	create.Flags().StringSliceVar(&o.freeKeys, "free-label-keys", nil, "Label keys whose values each registering cluster chooses (the agent chart's labels); any other label is refused")
	create.Flags().Int32Var(&o.max, "max", 1, "How many clusters may register with the token")
	create.Flags().StringVar(&o.valuesFile, "values-file", "", "Write the chart values to this file (mode 0600) instead of the command line")
	create.Flags().StringVar(&o.clusterName, "cluster-name", "", "The cluster's Remote name to put in the printed command (default: the chart names the cluster after its kube-system namespace's UID)")
	create.Flags().StringVar(&o.chart, "chart", "", "The fleet-agent chart reference for the printed command (default: the chart the fleet was released with, as the manager writes it into the token's Secret, or charts/fleet-agent where it writes none)")
	create.Flags().DurationVar(&o.timeout, "timeout", 30*time.Second, "How long to wait for the manager to issue the token")
	token.AddCommand(create)
	return token
}

// createToken creates the RegistrationToken and returns the agent chart
// values and the chart reference (empty when none) the manager writes into
// its Secret.
func createToken(ctx context.Context, c client.Client, ns, name string, o tokenOptions) (credential.AgentValues, string, error) {
	var values credential.AgentValues
	var chart string
	tok := &fleeetv1.RegistrationToken{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleeetv1.RegistrationTokenSpec{
			TTL: &metav1.Duration{Duration: o.ttl}, MaxRegistrations: o.max, RemoteLabels: o.labels, FreeLabelKeys: o.freeKeys,
		},
	}
	if err := c.Create(ctx, tok); err != nil {
		return values, "", err
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, o.timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(tok), tok); err != nil {
			return false, err
		}
		if stalled := apimeta.FindStatusCondition(tok.Status.Conditions, fleeetv1.StalledCondition); stalled != nil && stalled.Status == metav1.ConditionTrue {
			return false, fmt.Errorf("RegistrationToken %s/%s is stalled: %s: %s", ns, name, stalled.Reason, stalled.Message)
		}
		if tok.Status.SecretName == "" {
			return false, nil
		}
		secret := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tok.Status.SecretName}, secret); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		chart = string(secret.Data[credential.ChartKey])
		return true, yaml.Unmarshal(secret.Data[credential.ValuesKey], &values)
	})
	if err != nil {
		return values, "", fmt.Errorf("waiting for the manager to issue RegistrationToken %s/%s: %w", ns, name, err)
	}
	return values, chart, nil
}

// printInstall prints the helm command that enrols a cluster: the
// enrolment string is its one required value. With --values-file it goes
// into that file, readable by the caller only, instead of the command line
// (and so the shell history).
func printInstall(cmd *cobra.Command, v credential.AgentValues, o tokenOptions) error {
	enrolment, err := v.Enrolment()
	if err != nil {
		return err
	}
	install := []string{"helm install fleet-agent " + o.chart, "--namespace fleeet-system --create-namespace"}
	if o.valuesFile != "" {
		data, err := yaml.Marshal(map[string]string{"token": enrolment})
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.valuesFile, data, 0o600); err != nil {
			return err
		}
		install = append(install, "-f "+o.valuesFile)
	} else {
		install = append(install, "--set token="+enrolment)
	}
	if o.clusterName != "" {
		install = append(install, "--set clusterName="+o.clusterName)
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), strings.Join(install, " \\\n  "))
	return err
}
