package fleetctl

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fluximport"
)

// sourceTimeout bounds each read of a source while importing.
const sourceTimeout = 30 * time.Second

func newImportCommand(s *session) *cobra.Command {
	var selector, out, output string
	var apply bool
	cmd := &cobra.Command{
		Use:   "import DIR --namespace TENANT [--selector k=v] [--out DIR] [-o json] [--apply]",
		Short: "Turn a checkout of Flux objects or Rancher Fleet bundles into Modules, reporting what does not convert",
		Long: `Reads every *.yaml and *.yml under DIR and turns each Flux Kustomization and HelmRelease into a
Module of the tenant namespace --namespace, its source (GitRepository, HelmRepository,
OCIRepository) pinned to one version: a branch to the commit it holds now, a semver range to the
highest version the source offers now, the range kept as the Module's versionPolicy. Every Module
selects the Remotes --selector selects, every Remote unless set.

Rancher Fleet input is read in the same walk, DIR taken for the root of the GitRepo's repository:
each bundle (a directory with a fleet.yaml under a GitRepo's paths, or a path of plain manifests)
becomes a Module of the GitRepo's repository pinned as above, a chart of a Helm repository or by
path, or a kustomize path; the GitRepo's one target's clusterSelector is its selector, and
targetCustomizations of helm values or of the kustomize dir its overrides.

The Modules are written to stdout as one YAML stream, or with --out one file per Module. The
report goes to stderr, as text or with -o json as JSON: per object "converted", "converted with
rewrites" or "not converted", with the field and why, the Secrets to deliver, and counts. Nothing
is applied unless --apply: then each Module is created in the management cluster, admission
judging it, and the report says which were created and why the others were refused (the command
then fails). Without it, review the Modules and kubectl apply them (fleetctl diff -f previews
one).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns := *s.kube.Namespace
			if ns == "" {
				return errors.New("--namespace: give the tenant namespace the Modules go in")
			}
			sel, err := metav1.ParseToLabelSelector(selector)
			if err != nil {
				return err
			}
			if output != "" && output != "json" {
				return errors.New("--output: want json, or nothing for text")
			}
			modules, report, err := fluximport.Import(cmd.Context(), args[0], fluximport.Options{
				Namespace: ns, Selector: sel, HTTP: &http.Client{Timeout: sourceTimeout},
			})
			if err != nil {
				return err
			}
			if out != "" {
				if err := os.MkdirAll(out, 0o755); err != nil {
					return err
				}
			}
			var stream bytes.Buffer
			for i := range modules {
				manifest, err := fluximport.Manifest(&modules[i])
				if err != nil {
					return err
				}
				if out != "" {
					if err := os.WriteFile(filepath.Join(out, modules[i].Name+".yaml"), manifest, 0o644); err != nil {
						return err
					}
					continue
				}
				stream.WriteString("---\n")
				stream.Write(manifest)
			}
			if _, err := cmd.OutOrStdout().Write(stream.Bytes()); err != nil {
				return err
			}
			if apply {
				if err := s.createModules(cmd.Context(), modules, report); err != nil {
					return err
				}
				// The report names each refusal: an error line after it
				// would only repeat it, and break -o json.
				cmd.SilenceErrors = report.Refused() != nil
			}
			if done, err := printStructured(cmd.ErrOrStderr(), output, report); done || err != nil {
				return cmp.Or(err, report.Refused())
			}
			report.Print(cmd.ErrOrStderr())
			return report.Refused()
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "Label selector of the Remotes every Module selects, as kubectl takes it; empty selects every Remote")
	cmd.Flags().BoolVar(&apply, "apply", false, "Create each Module in the management cluster too, as admission judges it; one that exists already is refused, not updated")
	cmd.Flags().StringVar(&out, "out", "", "A directory to write one file per Module into, instead of stdout")
	addOutputFlag(cmd, &output)
	return cmd
}

// createModules creates each Module in the management cluster, recording
// in report what admission and the API answered.
func (s *session) createModules(ctx context.Context, modules []fleeetv1.Module, report *fluximport.Report) error {
	c, _, err := s.client()
	if err != nil {
		return err
	}
	for i := range modules {
		a := fluximport.Applied{Module: modules[i].Name}
		switch err := c.Create(ctx, &modules[i]); {
		case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsAlreadyExists(err):
			a.Refusal = err.Error()
		case err != nil:
			return err
		}
		report.Applied = append(report.Applied, a)
	}
	return nil
}
