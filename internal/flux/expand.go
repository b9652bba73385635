// Package flux turns fleeet syncs into Flux objects (a GitRepository,
// OCIRepository or HelmRepository, and a Kustomization or HelmRelease
// reading from it) and reads back whether those objects are Ready at the
// version the sync pins.
package flux

import (
	"cmp"
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
// without any change, unless the sync sets its interval. Versions are
// exact, so this only repairs drift.
const fluxInterval = 10 * time.Minute

// fluxRetryInterval is how soon Flux retries a Kustomization that failed,
// unless the sync sets its retryInterval. Flux's default is the interval
// itself; a transient failure (seen here: a build racing an artifact
// update) would then hold a sync, and every sync depending on it, for ten
// minutes.
const fluxRetryInterval = time.Minute

// helmChartLayer is the media type of the layer holding a Helm chart in an
// OCI artifact, as helm push writes it.
const helmChartLayer = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"

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

// Expansion is what one sync becomes: a source object (GitRepository,
// OCIRepository or HelmRepository) and an applier (Kustomization or
// HelmRelease) reading from it, with the revision the applier must report
// before dependents may proceed.
type Expansion struct {
	Source  client.Object
	Applier client.Object
	Want    Revision
}

// Revision is the desired version of a sync as Flux reports it once applied.
type Revision struct {
	// GitTag or GitCommit for git sources, OCITag or OCIDigest for oci
	// sources, ChartVersion for helm sources.
	GitTag, GitCommit, OCITag, OCIDigest, ChartVersion string
	// Chart is set for a HelmRelease of a chart in a git or oci source:
	// Flux versions such a chart after the source's artifact, so the
	// release is matched against what the source fetched.
	Chart bool
	// Any matches every revision: what a dependency gated at any version
	// (readyAt: Any) is judged against.
	Any bool
}

// String renders the revision for messages.
func (r Revision) String() string {
	return cmp.Or(r.GitTag, r.GitCommit, r.OCITag, r.OCIDigest, r.ChartVersion)
}

// Matches reports whether what an applier applied is this revision.
// applied is what Flux reports: a Kustomization's lastAppliedRevision, the
// source's artifact revision such as "v1.0.0@sha1:…" or "1.0.0@sha256:…", or
// a HelmRelease's chart version (AppliedRevision). fetched is the revision
// of the source's artifact, which a chart of a git or oci source is matched
// through.
func (r Revision) Matches(applied, fetched string) bool {
	switch {
	case r.Any:
		return true
	case r.Chart && (r.GitTag != "" || r.GitCommit != ""):
		// Source-controller versions a chart built from git
		// <version>+<first 12 hex of the commit> (reconcileStrategy
		// Revision), so the release names the commit the source fetched.
		i := strings.LastIndex(fetched, "sha1:")
		if i < 0 || !r.matchesArtifact(fetched) {
			return false
		}
		sha := fetched[i+len("sha1:"):]
		return len(sha) >= 12 && strings.HasSuffix(applied, "+"+sha[:12])
	case r.Chart:
		// Helm-controller records the digest of the artifact it released
		// (AppliedRevision adds it as @sha256:…).
		_, digest, _ := strings.Cut(fetched, "@")
		return r.matchesArtifact(fetched) && strings.HasSuffix(applied, "@"+cmp.Or(digest, fetched))
	case r.ChartVersion != "":
		return strings.TrimPrefix(applied, "v") == strings.TrimPrefix(r.ChartVersion, "v")
	default:
		return r.matchesArtifact(applied)
	}
}

// matchesArtifact reports whether a source artifact's revision is this one.
func (r Revision) matchesArtifact(rev string) bool {
	switch {
	case r.GitTag != "":
		return strings.HasPrefix(rev, r.GitTag+"@sha1:")
	case r.GitCommit != "":
		return strings.HasSuffix(rev, "sha1:"+r.GitCommit)
	case r.OCITag != "":
		return strings.HasPrefix(rev, r.OCITag+"@sha256:")
	case r.OCIDigest != "":
		return rev == r.OCIDigest || strings.HasSuffix(rev, "@"+r.OCIDigest)
	}
	return false
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
	src, want, err := expandSource(sync, objectMeta())
	if err != nil {
		return nil, err
	}
	var x *Expansion
	switch {
	case sync.Package.Kustomize != nil && sync.Source.Helm == nil:
		x = expandKustomize(t, sync, values, objectMeta(), src)
	case sync.Package.Helm != nil:
		x, err = expandHelm(t, sync, values, objectMeta(), src)
	default:
		err = fmt.Errorf("package: set kustomize or helm; a helm source is installed with a helm package")
	}
	if err != nil {
		return nil, err
	}
	x.Want, x.Want.Chart = want, sync.Package.Helm != nil && sync.Source.Helm == nil
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
	if len(sync.Secrets) > 0 {
		// In the hash, so the record is always the applied sync's own.
		var names []string
		for _, secret := range sync.Secrets {
			names = append(names, secret.Name)
		}
		x.Applier.GetAnnotations()[fleeetv1.SecretsAnnotation] = strings.Join(names, ",")
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

// intervals are a sync's interval and retryInterval, or their defaults.
func intervals(sync *fleeetv1.NamedSync) (interval, retry metav1.Duration) {
	interval, retry = metav1.Duration{Duration: fluxInterval}, metav1.Duration{Duration: fluxRetryInterval}
	if sync.Interval != nil {
		interval = *sync.Interval
	}
	if sync.RetryInterval != nil {
		retry = *sync.RetryInterval
	}
	return interval, retry
}

// expandSource makes the Flux source object of a sync: a GitRepository, an
// OCIRepository or a HelmRepository, and the revision it pins.
func expandSource(sync *fleeetv1.NamedSync, om metav1.ObjectMeta) (client.Object, Revision, error) {
	interval, _ := intervals(sync)
	s := sync.Source
	switch {
	case s.Git != nil:
		tag := strings.TrimPrefix(s.Git.Tag, "refs/tags/")
		return &sourcev1.GitRepository{ObjectMeta: om, Spec: sourcev1.GitRepositorySpec{
			URL:       s.Git.URL,
			Interval:  interval,
			Reference: &sourcev1.GitRepositoryRef{Tag: tag, Commit: s.Git.Revision},
			SecretRef: secretRef(s.SecretRef),
			Ignore:    s.Git.Ignore,
		}}, Revision{GitTag: tag, GitCommit: s.Git.Revision}, nil
	case s.OCI != nil:
		repo := &sourcev1.OCIRepository{ObjectMeta: om, Spec: sourcev1.OCIRepositorySpec{
			URL:           s.OCI.URL,
			Interval:      interval,
			Reference:     &sourcev1.OCIRepositoryRef{Tag: s.OCI.Tag, Digest: s.OCI.Digest},
			SecretRef:     secretRef(s.SecretRef),
			CertSecretRef: secretRef(s.CertSecretRef),
			Insecure:      s.OCI.Insecure,
		}}
		if sync.Package.Helm != nil {
			// Helm-controller wants the chart archive as it was pushed.
			repo.Spec.LayerSelector = &sourcev1.OCILayerSelector{MediaType: helmChartLayer, Operation: sourcev1.OCILayerCopy}
		}
		if v := s.OCI.Verify; v != nil {
			repo.Spec.Verify = &sourcev1.OCIRepositoryVerification{Provider: "cosign", SecretRef: secretRef(&v.SecretRef)}
		}
		return repo, Revision{OCITag: s.OCI.Tag, OCIDigest: s.OCI.Digest}, nil
	case s.Helm != nil:
		repo := &sourcev1.HelmRepository{ObjectMeta: om, Spec: sourcev1.HelmRepositorySpec{
			URL:           s.Helm.URL,
			Interval:      interval,
			SecretRef:     secretRef(s.SecretRef),
			CertSecretRef: secretRef(s.CertSecretRef),
		}}
		if strings.HasPrefix(s.Helm.URL, "oci://") {
			repo.Spec.Type = sourcev1.HelmRepositoryTypeOCI
		}
		return repo, Revision{ChartVersion: s.Helm.Version}, nil
	}
	return nil, Revision{}, fmt.Errorf("source: exactly one of git, helm or oci must be set")
}

func expandKustomize(t Target, sync *fleeetv1.NamedSync, values map[string]string, om metav1.ObjectMeta, src client.Object) *Expansion {
	pkg := sync.Package.Kustomize
	interval, retry := intervals(sync)
	ks := &kustomizev1.Kustomization{
		ObjectMeta: om,
		Spec: kustomizev1.KustomizationSpec{
			Interval:           interval,
			RetryInterval:      &retry,
			Path:               pkg.Path,
			Prune:              pkg.Prune == nil || *pkg.Prune,
			Wait:               pkg.Wait == nil || *pkg.Wait,
			Timeout:            timeout(pkg.Timeout),
			Force:              pkg.Force != nil && *pkg.Force,
			TargetNamespace:    pkg.TargetNamespace,
			ServiceAccountName: t.ServiceAccountName,
			KubeConfig:         t.KubeConfig,
			SourceRef: kustomizev1.CrossNamespaceSourceReference{
				Kind: sourceKind(src), Name: src.GetName(),
			},
		},
	}
	if pkg.Decryption != nil {
		ks.Spec.Decryption = &kustomizev1.Decryption{Provider: sopsProvider, SecretRef: secretRef(&pkg.Decryption.SecretRef)}
	}
	for _, h := range pkg.HealthChecks {
		// Flux looks an object without a namespace up cluster-wide, where
		// a namespaced one is never found.
		ks.Spec.HealthChecks = append(ks.Spec.HealthChecks, meta.NamespacedObjectKindReference{
			APIVersion: h.APIVersion, Kind: h.Kind, Name: h.Name, Namespace: cmp.Or(h.Namespace, pkg.TargetNamespace, t.Namespace)})
	}
	for _, e := range pkg.HealthCheckExprs {
		ks.Spec.HealthCheckExprs = append(ks.Spec.HealthCheckExprs, kustomize.CustomHealthCheck{
			APIVersion: e.APIVersion, Kind: e.Kind,
			HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: e.Current, InProgress: e.InProgress, Failed: e.Failed}})
	}
	if len(pkg.Substitute) > 0 || len(pkg.SubstituteFrom) > 0 {
		ks.Spec.PostBuild = &kustomizev1.PostBuild{}
	}
	if len(pkg.Substitute) > 0 {
		subst := make(map[string]string, len(pkg.Substitute))
		for k, v := range pkg.Substitute {
			subst[k] = bindings.Expand(v, values)
		}
		ks.Spec.PostBuild.Substitute = subst
	}
	for _, ref := range pkg.SubstituteFrom {
		ks.Spec.PostBuild.SubstituteFrom = append(ks.Spec.PostBuild.SubstituteFrom,
			kustomizev1.SubstituteReference{Kind: ref.Kind, Name: ref.Name, Optional: ref.Optional})
	}
	ks.Spec.Patches = patches(pkg.Patches)
	for _, img := range pkg.Images {
		ks.Spec.Images = append(ks.Spec.Images, kustomize.Image{Name: img.Name, NewName: img.NewName, NewTag: img.NewTag, Digest: img.Digest})
	}
	ks.Spec.Components = slices.Clone(pkg.Components)
	return &Expansion{Source: src, Applier: ks}
}

func expandHelm(t Target, sync *fleeetv1.NamedSync, values map[string]string, om metav1.ObjectMeta, src client.Object) (*Expansion, error) {
	pkg := sync.Package.Helm
	interval, _ := intervals(sync)
	releaseName := pkg.ReleaseName
	if releaseName == "" {
		releaseName = sync.Name
	}
	hr := &helmv2.HelmRelease{
		ObjectMeta: om,
		Spec: helmv2.HelmReleaseSpec{
			Interval:           interval,
			ReleaseName:        releaseName,
			TargetNamespace:    pkg.TargetNamespace,
			StorageNamespace:   pkg.StorageNamespace,
			ServiceAccountName: t.ServiceAccountName,
			KubeConfig:         t.KubeConfig,
			Timeout:            timeout(pkg.Timeout),
		},
	}
	ref := helmv2.CrossNamespaceObjectReference{Kind: sourceKind(src), Name: src.GetName()}
	switch s := sync.Source; {
	case s.Helm != nil:
		hr.Spec.Chart = &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{
			Chart: s.Helm.Chart, Version: s.Helm.Version, SourceRef: ref,
		}}
	case s.Git != nil && pkg.Chart == "":
		return nil, fmt.Errorf("package.helm.chart: must name the chart's path in the git source")
	case s.Git != nil:
		// Revision: a new commit is a new chart even when Chart.yaml keeps
		// its version, and the chart's version names the commit.
		hr.Spec.Chart = &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{
			Chart: pkg.Chart, SourceRef: ref, ReconcileStrategy: sourcev1.ReconcileStrategyRevision,
		}}
	default:
		hr.Spec.ChartRef = &helmv2.CrossNamespaceSourceReference{Kind: ref.Kind, Name: ref.Name}
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
	for _, ref := range pkg.ValuesFrom {
		hr.Spec.ValuesFrom = append(hr.Spec.ValuesFrom, helmv2.ValuesReference{Kind: ref.Kind, Name: ref.Name,
			ValuesKey: ref.ValuesKey, TargetPath: ref.TargetPath, Optional: ref.Optional})
	}
	return &Expansion{Source: src, Applier: hr}, nil
}

// sourceKind is the Flux kind of a source object expandSource made.
func sourceKind(src client.Object) string {
	switch src.(type) {
	case *sourcev1.GitRepository:
		return sourcev1.GitRepositoryKind
	case *sourcev1.OCIRepository:
		return sourcev1.OCIRepositoryKind
	default:
		return sourcev1.HelmRepositoryKind
	}
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
// Both name Flux's RemediateOnFailure strategy, Flux's default, unless the
// sync's upgradeStrategy asks for RetryOnFailure: a helm-controller started
// with the DefaultToRetryOnFailure feature gate would otherwise retry
// without ever remediating. Under RetryOnFailure the upgrade carries no
// remediation, which Flux would ignore (admission refuses one).
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
	if u := r.UpgradeStrategy; u != nil && u.Name == fleeetv1.RetryOnFailure {
		return install, &helmv2.Upgrade{Strategy: &helmv2.UpgradeStrategy{
			Name: string(helmv2.ActionStrategyRetryOnFailure), RetryInterval: u.RetryInterval.DeepCopy(),
		}}
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
