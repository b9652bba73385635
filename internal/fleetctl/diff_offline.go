package fleetctl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/fleeet-dev/fleeet/internal/offline"
)

// offlineDiff is fleetctl diff --offline: two checkouts of a fleet, each
// compiled and rendered cluster by cluster, compared.
type offlineDiff struct {
	on              bool
	base, head      string
	credentialsFile string
	plainHTTP       bool
	downstreamNS    string
	kubeVersion     string
}

// OfflineView is what fleetctl diff --offline shows: every rendering that
// differs between the checkouts, and the head's syncs that fail to render.
type OfflineView struct {
	Diffs  []offline.Diff `json:"diffs,omitempty"`
	Failed []string       `json:"failed,omitempty"`
}

// addOfflineFlags registers --offline and the flags only it reads.
func addOfflineFlags(cmd *cobra.Command, o *offlineDiff) {
	cmd.Flags().BoolVar(&o.on, "offline", false, "Compare two checkouts of the fleet's files (-f and --base), rendering what each cluster would apply, with no cluster")
	cmd.Flags().StringVar(&o.base, "base", "", "With --offline: the checkout to compare -f with; absent, everything -f renders is new")
	cmd.Flags().StringVar(&o.credentialsFile, "credentials-file", os.Getenv("FLEETCTL_CREDENTIALS_FILE"),
		"With --offline: credentials for private sources, one scheme://user:password@host a line (https, http, oci), each given only to its host; default $FLEETCTL_CREDENTIALS_FILE")
	cmd.Flags().BoolVar(&o.plainHTTP, "plain-http", false, "With --offline: pull charts from oci registries over plain HTTP")
	cmd.Flags().StringVar(&o.downstreamNS, "downstream-namespace", "",
		"With --offline: the tenant's downstream namespace, where a helm release without targetNamespace goes; default the management namespace")
	cmd.Flags().StringVar(&o.kubeVersion, "kube-version", offline.DefaultKubeVersion, "With --offline: the Kubernetes version charts are templated for on a Remote whose status in the files does not say")
}

// offlineDiff runs fleetctl diff --offline, reporting whether anything
// differs.
func (s *session) offlineDiff(cmd *cobra.Command, off *offlineDiff, head, online, output string, maxPlanBytes int) (bool, error) {
	switch {
	case head == "" || head == "-":
		return false, errors.New("--offline: give the checkout to render with -f DIR")
	case online != "":
		return false, errors.New("--offline previews two checkouts: --delete and --remote preview a change to the cluster")
	}
	// Files are read the same wherever the command runs: the kubeconfig's
	// namespace is not.
	ns := cmp.Or(*s.kube.Namespace, "default")
	off.head = head
	view, err := off.run(cmd.Context(), ns, maxPlanBytes)
	if err != nil {
		return false, err
	}
	if err := show(cmd.OutOrStdout(), output, view); err != nil {
		return false, err
	}
	return len(view.Diffs) > 0, view.err()
}

// run renders both checkouts and compares them; objects without a
// namespace are in namespace. The head failing to render a sync is an
// error, after the view is built: the change would not apply.
func (o *offlineDiff) run(ctx context.Context, namespace string, maxPlanBytes int) (*OfflineView, error) {
	creds, err := offline.ReadCredentials(o.credentialsFile)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "fleetctl-diff-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	plans := func(path string, held []offline.Plan) ([]offline.Plan, error) {
		if path == "" {
			return nil, nil // no base: everything is added
		}
		fleet, err := offline.Load(namespace, path)
		if err != nil {
			return nil, err
		}
		return fleet.Plans(ctx, maxPlanBytes, held)
	}
	base, err := plans(o.base, nil)
	if err != nil {
		return nil, fmt.Errorf("--base: %w", err)
	}
	// The head's plans start from the base's, as the manager's from what
	// each Remote holds: a change that does not fit is the one left out.
	head, err := plans(o.head, base)
	if err != nil {
		return nil, fmt.Errorf("-f: %w", err)
	}
	// One renderer for both: what the change leaves alone renders once.
	r := &offline.Renderer{Sources: offline.NewSources(work, creds, o.plainHTTP), Namespace: cmp.Or(o.downstreamNS, namespace), KubeVersion: o.kubeVersion}
	before, after := offline.RenderPlans(ctx, r, base), offline.RenderPlans(ctx, r, head)
	return &OfflineView{Diffs: offline.Compare(before, after), Failed: after.Failed}, nil
}

// print writes the view as unified diffs, then what failed.
func (v *OfflineView) print(w io.Writer) {
	remotes := map[string]bool{}
	for _, d := range v.Diffs {
		fmt.Fprint(w, d.Unified)
		remotes[d.Namespace+"/"+d.Remote] = true
	}
	if len(v.Diffs) == 0 {
		fmt.Fprintln(w, "no differences in what any cluster would apply")
	} else {
		fmt.Fprintf(w, "%d rendering(s) differ on %d Remote(s)\n", len(v.Diffs), len(remotes))
	}
	for _, f := range v.Failed {
		fmt.Fprintf(w, "render failed: %s\n", f)
	}
}

// err is the view's error: the syncs the head fails to render.
func (v *OfflineView) err() error {
	if len(v.Failed) == 0 {
		return nil
	}
	return fmt.Errorf("%d sync(s) of -f cannot be rendered, listed above", len(v.Failed))
}
