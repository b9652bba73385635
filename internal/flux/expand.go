// Package flux turns fleeet syncs into Flux objects (GitRepository and
// Kustomization, or HelmRepository and HelmRelease) and reads back whether
// those objects are Ready at the version the sync pins.
package flux

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/bindings"
)

// fluxInterval is how often Flux re-checks a source and re-applies a sync
// without any change. Versions are exact, so this only repairs drift.
const fluxInterval = 10 * time.Minute

// fluxRetryInterval is how soon Flux retries a Kustomization that failed.
// Flux's default is the interval itself; a transient failure (seen here: a
// build racing an artifact update) would then hold a sync, and every sync
// depending on it, for ten minutes.
const fluxRetryInterval = time.Minute

// defaultTimeout bounds a sync's Flux work when the sync sets no timeout:
// building, applying and waiting for a Kustomization's objects to be ready,
// and each Helm action of a HelmRelease with Helm's wait. Flux's default for
// a Kustomization is its interval less 30s (here 9.5 minutes), holding a
// failing sync's dependents that long before it is reported; five minutes is
// Helm's own default, so both kinds give up alike.
const defaultTimeout = 5 * time.Minute

// defaultHelmRetries is how many more times a failed install or upgrade is
// tried when a sync does not say.
const defaultHelmRetries = 3

// Expansion is what one sync becomes: a source object
// (GitRepository or HelmRepository) and an applier (Kustomization or
// HelmRelease) reading from it, with the revision the applier must report
// before dependents may proceed.
type Expansion struct {
	Source  client.Object
	Applier client.Object
	Want    Revision
}

// Revision is the desired version of a sync as Flux reports it once applied.
type Revision struct {
	// gitTag or gitCommit for kustomize syncs; chartVersion for helm syncs.
	GitTag, GitCommit, ChartVersion string
}

// String renders the revision for messages.
func (r Revision) String() string {
	switch {
	case r.GitTag != "":
		return r.GitTag
	case r.GitCommit != "":
		return r.GitCommit
	default:
		return r.ChartVersion
	}
}

// Matches reports whether a revision Flux reports (a Kustomization's
// lastAppliedRevision such as "v1.0.0@sha1:…", or a chart version) is this one.
func (r Revision) Matches(applied string) bool {
	switch {
	case r.GitTag != "":
		return strings.HasPrefix(applied, r.GitTag+"@sha1:")
	case r.GitCommit != "":
		return strings.HasSuffix(applied, "sha1:"+r.GitCommit)
	default:
		return strings.TrimPrefix(applied, "v") == strings.TrimPrefix(r.ChartVersion, "v")
	}
}

// ObjectName is the name of a sync's Flux objects: the sync's name with a
// hash of assemblage and sync name, so two assemblages sharing a namespace
// never collide and the name stays within 63 characters.
func ObjectName(asm, sync string) string {
	sum := sha256.Sum256([]byte(asm + "/" + sync))
	return fmt.Sprintf("%s-%s", truncate(sync, 52), hex.EncodeToString(sum[:])[:10])
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.TrimRight(s[:n], "-")
}

// Target says where and how a sync's Flux objects run.
type Target struct {
	// Owner names what the objects are expanded for (an Assemblage, or a
	// BootstrapModule and Remote); with the sync's name it makes their name.
	Owner string
	// Namespace the objects live in.
	Namespace string
	// Labels set on every object.
	Labels map[string]string
	// ServiceAccountName that Flux impersonates to apply the sync.
	ServiceAccountName string
	// KubeConfig, when set, makes Flux apply to another cluster.
	KubeConfig *meta.KubeConfigReference
	// Retry, when set, is the token of the last retry request: every object
	// asks Flux to reconcile for it, and a HelmRelease to reset its failure
	// counts. Each new token is handled once.
	Retry string
}

// Expand turns one sync, with its bindings already resolved into values,
// into the Flux objects that run it. deps are the syncs it depends on,
// recorded so removal can run in reverse order.
func Expand(t Target, sync *fleeetv1.NamedSync, values map[string]string, deps []string) (*Expansion, error) {
	name := ObjectName(t.Owner, sync.Name)
	objectMeta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: t.Namespace, Labels: maps.Clone(t.Labels)}
	}
	var x *Expansion
	var err error
	switch {
	case sync.Source.Git != nil && sync.Package.Kustomize != nil:
		x = expandKustomize(t, sync, values, objectMeta)
	case sync.Source.Helm != nil && sync.Package.Helm != nil:
		x, err = expandHelm(t, sync, values, objectMeta)
	default:
		err = fmt.Errorf("a git source needs a kustomize package and a helm source a helm package")
	}
	if err != nil {
		return nil, err
	}
	objs := []client.Object{x.Source, x.Applier}
	for _, obj := range objs {
		obj.SetAnnotations(map[string]string{})
	}
	if t.Retry != "" {
		// The token is in the hash, so a new one re-applies the objects.
		for _, obj := range objs {
			obj.GetAnnotations()[meta.ReconcileRequestAnnotation] = t.Retry
		}
		if hr, ok := x.Applier.(*helmv2.HelmRelease); ok {
			hr.Annotations[helmv2.ResetRequestAnnotation] = t.Retry
		}
	}
	hash, err := specHash(x)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		obj.GetAnnotations()[fleeetv1.SpecHashAnnotation] = hash
	}
	if len(deps) > 0 {
		x.Applier.GetAnnotations()[fleeetv1.DependsOnAnnotation] = strings.Join(slices.Sorted(slices.Values(deps)), ",")
	}
	return x, nil
}

func expandKustomize(t Target, sync *fleeetv1.NamedSync, values map[string]string, objectMeta func() metav1.ObjectMeta) *Expansion {
	git, pkg := sync.Source.Git, sync.Package.Kustomize
	repo := &sourcev1.GitRepository{
		ObjectMeta: objectMeta(),
		Spec: sourcev1.GitRepositorySpec{
			URL:       git.URL,
			Interval:  metav1.Duration{Duration: fluxInterval},
			Reference: &sourcev1.GitRepositoryRef{Tag: strings.TrimPrefix(git.Tag, "refs/tags/"), Commit: git.Revision},
			SecretRef: secretRef(sync.Source.SecretRef),
		},
	}
	ks := &kustomizev1.Kustomization{
		ObjectMeta: objectMeta(),
		Spec: kustomizev1.KustomizationSpec{
			Interval:           metav1.Duration{Duration: fluxInterval},
			RetryInterval:      &metav1.Duration{Duration: fluxRetryInterval},
			Path:               pkg.Path,
			Prune:              pkg.Prune == nil || *pkg.Prune,
			Wait:               pkg.Wait == nil || *pkg.Wait,
			Timeout:            timeout(pkg.Timeout),
			Force:              pkg.Force != nil && *pkg.Force,
			TargetNamespace:    pkg.TargetNamespace,
			ServiceAccountName: t.ServiceAccountName,
			KubeConfig:         t.KubeConfig,
			SourceRef: kustomizev1.CrossNamespaceSourceReference{
				Kind: sourcev1.GitRepositoryKind, Name: repo.Name,
			},
		},
	}
	if pkg.Decryption != nil {
		ks.Spec.Decryption = &kustomizev1.Decryption{Provider: sopsProvider, SecretRef: secretRef(&pkg.Decryption.SecretRef)}
	}
	for _, h := range pkg.HealthChecks {
		ks.Spec.HealthChecks = append(ks.Spec.HealthChecks, meta.NamespacedObjectKindReference{
			APIVersion: h.APIVersion, Kind: h.Kind, Name: h.Name, Namespace: h.Namespace})
	}
	for _, e := range pkg.HealthCheckExprs {
		ks.Spec.HealthCheckExprs = append(ks.Spec.HealthCheckExprs, kustomize.CustomHealthCheck{
			APIVersion: e.APIVersion, Kind: e.Kind,
			HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: e.Current, InProgress: e.InProgress, Failed: e.Failed}})
	}
	if len(pkg.Substitute) > 0 {
		subst := make(map[string]string, len(pkg.Substitute))
		for k, v := range pkg.Substitute {
			subst[k] = bindings.Expand(v, values)
		}
		ks.Spec.PostBuild = &kustomizev1.PostBuild{Substitute: subst}
	}
	want := Revision{GitTag: strings.TrimPrefix(git.Tag, "refs/tags/"), GitCommit: git.Revision}
	return &Expansion{Source: repo, Applier: ks, Want: want}
}

func expandHelm(t Target, sync *fleeetv1.NamedSync, values map[string]string, objectMeta func() metav1.ObjectMeta) (*Expansion, error) {
	src, pkg := sync.Source.Helm, sync.Package.Helm
	repo := &sourcev1.HelmRepository{
		ObjectMeta: objectMeta(),
		Spec: sourcev1.HelmRepositorySpec{
			URL:       src.URL,
			Interval:  metav1.Duration{Duration: fluxInterval},
			SecretRef: secretRef(sync.Source.SecretRef),
		},
	}
	if strings.HasPrefix(src.URL, "oci://") {
		repo.Spec.Type = sourcev1.HelmRepositoryTypeOCI
	}
	releaseName := pkg.ReleaseName
	if releaseName == "" {
		releaseName = sync.Name
	}
	hr := &helmv2.HelmRelease{
		ObjectMeta: objectMeta(),
		Spec: helmv2.HelmReleaseSpec{
			Interval:           metav1.Duration{Duration: fluxInterval},
			ReleaseName:        releaseName,
			TargetNamespace:    pkg.TargetNamespace,
			ServiceAccountName: t.ServiceAccountName,
			KubeConfig:         t.KubeConfig,
			Timeout:            timeout(pkg.Timeout),
			Chart: &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{
				Chart:   src.Chart,
				Version: src.Version,
				SourceRef: helmv2.CrossNamespaceObjectReference{
					Kind: sourcev1.HelmRepositoryKind, Name: repo.Name,
				},
			}},
		},
	}
	hr.Spec.Install, hr.Spec.Upgrade = remediation(pkg.Remediation)
	hr.Spec.Install.CRDs, hr.Spec.Upgrade.CRDs = helmv2.CRDsPolicy(pkg.CRDs), helmv2.CRDsPolicy(pkg.CRDs)
	hr.Spec.Install.CreateNamespace = pkg.CreateNamespace
	hr.Spec.DriftDetection = driftDetection(pkg.DriftDetection)
	if len(pkg.PostRenderers) > 0 {
		hr.Spec.PostRenderers = []helmv2.PostRenderer{{Kustomize: &helmv2.Kustomize{Patches: patches(pkg.PostRenderers)}}}
	}
	if pkg.Values != nil && len(pkg.Values.Raw) > 0 {
		raw, err := bindings.ExpandJSON(pkg.Values.Raw, values)
		if err != nil {
			return nil, fmt.Errorf("package.helm.values: %w", err)
		}
		hr.Spec.Values = &apiextensionsv1.JSON{Raw: raw}
	}
	return &Expansion{Source: repo, Applier: hr, Want: Revision{ChartVersion: src.Version}}, nil
}

// sopsProvider is the only decryption provider kustomize-controller has.
const sopsProvider = "sops"

// timeout is a sync's timeout, or defaultTimeout.
func timeout(d *metav1.Duration) *metav1.Duration {
	if d == nil {
		return &metav1.Duration{Duration: defaultTimeout}
	}
	return d
}

// remediation is how a HelmRelease recovers from failures, from the sync's
// remediation with defaultHelmRetries for each retry count it leaves unset.
// A failed install is uninstalled before each retry (Flux's only way for
// installs) and the last one is left in place to be looked at: nothing ran
// before it. A failed upgrade is rolled back before each retry and after the
// last, so the release keeps running its last good version.
//
// Both name Flux's RemediateOnFailure strategy, Flux's default: a
// helm-controller started with the DefaultToRetryOnFailure feature gate
// would otherwise retry without ever remediating.
func remediation(r *fleeetv1.HelmRemediation) (*helmv2.Install, *helmv2.Upgrade) {
	if r == nil {
		r = &fleeetv1.HelmRemediation{}
	}
	retries := func(n *int32) int {
		if n == nil {
			return defaultHelmRetries
		}
		return int(*n)
	}
	strategy := helmv2.RollbackRemediationStrategy
	if r.Strategy == fleeetv1.UninstallRemediation {
		strategy = helmv2.UninstallRemediationStrategy
	}
	last := r.RemediateLastFailure == nil || *r.RemediateLastFailure
	install := &helmv2.Install{
		Strategy:    &helmv2.InstallStrategy{Name: string(helmv2.ActionStrategyRemediateOnFailure)},
		Remediation: &helmv2.InstallRemediation{Retries: retries(r.InstallRetries)},
	}
	upgrade := &helmv2.Upgrade{
		Strategy: &helmv2.UpgradeStrategy{Name: string(helmv2.ActionStrategyRemediateOnFailure)},
		Remediation: &helmv2.UpgradeRemediation{
			Retries: retries(r.UpgradeRetries), RemediateLastFailure: &last, Strategy: &strategy,
		},
	}
	return install, upgrade
}

// driftDetection is helm-controller's drift detection for a sync: as the
// sync says, or detecting and correcting drift when it says nothing.
// Flux's own default is to detect nothing, for compatibility with
// releases made before it could; a fleet described in git wants the
// cluster to match it, and a kubectl edit undone, as kustomize syncs
// already are at every interval.
func driftDetection(d *fleeetv1.HelmDriftDetection) *helmv2.DriftDetection {
	out := &helmv2.DriftDetection{Mode: helmv2.DriftDetectionEnabled}
	if d == nil {
		return out
	}
	switch d.Mode {
	case fleeetv1.DriftWarn:
		out.Mode = helmv2.DriftDetectionWarn
	case fleeetv1.DriftDisabled:
		out.Mode = helmv2.DriftDetectionDisabled
	}
	for _, rule := range d.Ignore {
		out.Ignore = append(out.Ignore, helmv2.IgnoreRule{Paths: slices.Clone(rule.Paths), Target: selector(rule.Target)})
	}
	return out
}

func secretRef(ref *fleeetv1.LocalObjectReference) *meta.LocalObjectReference {
	if ref == nil {
		return nil
	}
	return &meta.LocalObjectReference{Name: ref.Name}
}

// specHash is a digest of the specs the agent applies for a sync.
func specHash(x *Expansion) (string, error) {
	b, err := json.Marshal([]any{x.Source, x.Applier})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16], nil
}
