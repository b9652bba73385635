package fleetctl

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"

	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/fleetview"
)

// colours of the states on a terminal (ANSI SGR codes).
var colours = map[string]string{
	fleetview.StateReady: "32", fleetview.StatePending: "33", fleetview.StateProgressing: "33",
	fleetview.StateOffline: "90", fleetview.StateBlocked: "35", fleetview.StateFailed: "31",
}

// StatusView is `fleetctl status -o yaml|json`.
type StatusView struct {
	Namespace string `json:"namespace"`
	// Modules maps each Module to its current version.
	Modules map[string]string `json:"modules"`
	Remotes []RemoteView      `json:"remotes"`
}

// RemoteView is one row of the grid.
type RemoteView struct {
	Name      string `json:"name"`
	Connected bool   `json:"connected"`
	// AgentVersion and KubernetesVersion are what the Remote's agent
	// reports; empty until it has.
	AgentVersion      string `json:"agentVersion,omitempty"`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Flux is the Flux the cluster runs, as its agent (or, in push mode,
	// the manager) reads it; FluxProblem says, while the cluster's Flux
	// does not serve what fleeet writes, why (the FluxCompatible
	// condition's reason and message).
	Flux        *fleeetv1.FluxStatus `json:"flux,omitempty"`
	FluxProblem string               `json:"fluxProblem,omitempty"`
	// AgentSkew says where the agent's version stands against the
	// manager's (the AgentCompatible condition): ok, skew (outside the
	// window), unknown, or empty until judged; AgentProblem is, unless ok,
	// the condition's reason and message.
	AgentSkew    string                    `json:"agentSkew,omitempty"`
	AgentProblem string                    `json:"agentProblem,omitempty"`
	Cells        map[string]fleetview.Cell `json:"cells"`
}

// agentSkews are the AgentSkew of each AgentCompatible status.
var agentSkews = map[metav1.ConditionStatus]string{
	metav1.ConditionTrue: "ok", metav1.ConditionFalse: "skew", metav1.ConditionUnknown: "unknown",
}

func newStatusCommand(s *session) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "The fleet at a glance: every Remote against every Module, with state and version",
		Long: `Shows one row per Remote and one column per Module of the namespace. A cell says what the
Remote runs of the Module: ready, pending (not in its plan or not reported yet), progressing,
blocked (waiting for a dependency), failed or offline, and the version its plan holds; a version
marked * is not the Module's current one yet; - marks a Remote the Module does not select. Where
the sync runs workloads, their ready pods against those wanted follow, with the reason pods are
not ready (CrashLoopBackOff, ImagePullBackOff, ReadinessProbeFailing…); fleetctl why says where.
-o wide adds the agent's, Kubernetes' and Flux's versions each Remote reports; FLUX names the
reason (FluxMissing, FluxIncompatible) when the cluster's Flux does not serve what fleeet writes;
SKEW says whether the agent's version is within the manager's skew window (ok), outside it
(skew: at most one minor version behind the manager, never ahead) or cannot be judged (unknown).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, f, err := s.fleet(cmd.Context())
			if err != nil {
				return err
			}
			view := statusView(f)
			switch output {
			case "", "wide":
				return printGrid(cmd.OutOrStdout(), f, view, colourful(cmd.OutOrStdout()), output == "wide")
			case "yaml", "json":
				_, err := printStructured(cmd.OutOrStdout(), output, view)
				return err
			}
			return fmt.Errorf("--output %q: want yaml, json or wide", output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: yaml, json, or wide (the table with versions); empty for the table")
	return cmd
}

// statusView is the grid of f: each Remote's cells, by Module.
func statusView(f *fleetview.Fleet) StatusView {
	v := StatusView{Namespace: f.Namespace, Modules: map[string]string{}, Remotes: []RemoteView{}}
	for i := range f.Modules {
		v.Modules[f.Modules[i].Name] = compile.Version(&f.Modules[i].Spec.Sync)
	}
	for i := range f.Remotes {
		r := &f.Remotes[i]
		row := RemoteView{Name: r.Name, Connected: !r.Offline(), Cells: map[string]fleetview.Cell{},
			AgentVersion: r.Status.AgentVersion, KubernetesVersion: r.Status.KubernetesVersion, Flux: r.Status.Flux}
		if c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.FluxCompatibleCondition); c != nil && c.Status == metav1.ConditionFalse {
			row.FluxProblem = c.Reason + ": " + c.Message
		}
		if c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.AgentCompatibleCondition); c != nil {
			row.AgentSkew = agentSkews[c.Status]
			if c.Status != metav1.ConditionTrue {
				row.AgentProblem = c.Reason + ": " + c.Message
			}
		}
		for j := range f.Modules {
			if cell := f.Cell(&f.Modules[j], r); cell.State != "" {
				row.Cells[f.Modules[j].Name] = cell
			}
		}
		v.Remotes = append(v.Remotes, row)
	}
	return v
}

// printGrid writes v, the grid of f, as fleetctl status shows it: coloured
// by state when colour is set, with each Remote's versions when wide is.
func printGrid(w io.Writer, f *fleetview.Fleet, v StatusView, colour, wide bool) error {
	if len(f.Remotes) == 0 && len(f.Modules) == 0 {
		_, err := fmt.Fprintf(w, "No Modules or Remotes in namespace %s.\n", f.Namespace)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "REMOTE")
	if wide {
		fmt.Fprint(tw, "\tAGENT\tSKEW\tKUBERNETES\tFLUX")
	}
	for _, m := range f.Modules {
		head := m.Name + "@" + v.Modules[m.Name]
		if colour {
			head = "\x1b[01m" + head + "\x1b[0m" // bold, as long as a colour code
		}
		fmt.Fprintf(tw, "\t%s", head)
	}
	fmt.Fprintln(tw)
	for _, row := range v.Remotes {
		fmt.Fprint(tw, row.Name)
		if wide {
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s", cmp.Or(row.AgentVersion, "-"), cmp.Or(row.AgentSkew, "-"),
				cmp.Or(row.KubernetesVersion, "-"), fluxText(row))
		}
		for _, m := range f.Modules {
			cell := row.Cells[m.Name]
			text := cell.Text()
			// Colour codes are zero-width on a terminal but not to
			// tabwriter, so every cell gets the same escape length.
			if colour {
				code := colours[cell.State]
				if code == "" {
					code = "39"
				}
				text = "\x1b[" + code + "m" + text + "\x1b[0m"
			}
			fmt.Fprintf(tw, "\t%s", text)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// fluxText is a row's FLUX column: the version (or each controller's), then
// the reason when Flux does not serve what fleeet writes; - until reported.
func fluxText(row RemoteView) string {
	text := row.Flux.String()
	if reason, _, ok := strings.Cut(row.FluxProblem, ":"); ok {
		text = strings.TrimSpace(text + " " + reason)
	}
	return cmp.Or(text, "-")
}
