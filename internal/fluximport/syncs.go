package fluximport

import (
	"cmp"
	"context"
	"encoding/json"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// kustomizationSpec holds the fields of a Kustomization's spec (v1 and
// v1beta2) that a Module says; most have fleeet's shape already.
type kustomizationSpec struct {
	SourceRef       sourceRef                 `json:"sourceRef"`
	Path            string                    `json:"path"`
	TargetNamespace string                    `json:"targetNamespace"`
	Patches         []fleeetv1.KustomizePatch `json:"patches"`
	// PatchesStrategicMerge and PatchesJSON6902 are v1beta2's forms of
	// patches, which Flux v1 folded into patches.
	PatchesStrategicMerge []apiextensionsv1.JSON `json:"patchesStrategicMerge"`
	PatchesJSON6902       []struct {
		Target *fleeetv1.PatchTarget  `json:"target"`
		Patch  []apiextensionsv1.JSON `json:"patch"`
	} `json:"patchesJson6902"`
	Images           []fleeetv1.KustomizeImage       `json:"images"`
	Components       []string                        `json:"components"`
	Prune            *bool                           `json:"prune"`
	Wait             *bool                           `json:"wait"`
	Force            *bool                           `json:"force"`
	Timeout          *metav1.Duration                `json:"timeout"`
	Interval         *metav1.Duration                `json:"interval"`
	RetryInterval    *metav1.Duration                `json:"retryInterval"`
	DependsOn        []dependency                    `json:"dependsOn"`
	HealthChecks     []fleeetv1.HealthCheckReference `json:"healthChecks"`
	HealthCheckExprs []fleeetv1.HealthCheckExpr      `json:"healthCheckExprs"`
	Suspend          bool                            `json:"suspend"`
	PostBuild        *struct {
		Substitute     map[string]string              `json:"substitute"`
		SubstituteFrom []fleeetv1.SubstituteReference `json:"substituteFrom"`
	} `json:"postBuild"`
	Decryption *struct {
		Provider  string                         `json:"provider"`
		SecretRef *fleeetv1.LocalObjectReference `json:"secretRef"`
	} `json:"decryption"`
}

var kustomizationFields = fields(
	"sourceRef path targetNamespace patches patchesStrategicMerge patchesJson6902 images components prune wait force "+
		"timeout interval retryInterval dependsOn healthChecks healthCheckExprs suspend postBuild decryption",
	map[string]verdict{
		"serviceAccountName":      {drop: whyServiceAccount},
		"deletionPolicy":          {drop: "fleeet deletes what a removed sync applied as prune says"},
		"validation":              {drop: "Flux v1 removed it; the apply is always validated server-side"},
		"kubeConfig":              {refuse: whyKubeConfig},
		"commonMetadata":          {refuse: whyNoField},
		"namePrefix":              {refuse: whyNoField},
		"nameSuffix":              {refuse: whyNoField},
		"ignoreMissingComponents": {refuse: whyNoField},
	})

// kustomization converts a Kustomization into a kustomize sync of its
// source.
func (i *importer) kustomization(ctx context.Context, o *object, c *conversion) *fleeetv1.ModuleSpec {
	c.check("spec", o.Spec, kustomizationFields)
	var k kustomizationSpec
	if err := json.Unmarshal(o.Spec, &k); err != nil {
		c.refuse("spec: %v", err)
		return nil
	}
	spec := &fleeetv1.ModuleSpec{}
	src := i.lookup(o, "spec.sourceRef", k.SourceRef, c, "GitRepository", "OCIRepository")
	switch {
	case src == nil:
	case src.Kind == "GitRepository":
		spec.Sync.Source, spec.VersionPolicy = i.gitSource(ctx, src, c)
	default:
		spec.Sync.Source, spec.VersionPolicy = i.ociSource(ctx, src, c)
	}
	p := &fleeetv1.KustomizePackage{
		Path: k.Path, TargetNamespace: k.TargetNamespace, Patches: v1Patches(&k, c), Images: k.Images, Components: k.Components,
		Prune: k.Prune, Wait: k.Wait, Force: k.Force, Timeout: k.Timeout, HealthChecks: k.HealthChecks, HealthCheckExprs: k.HealthCheckExprs,
	}
	if len(k.HealthChecks) > 0 && k.Wait == nil {
		p.Wait = ptr.To(false) // Flux's default, which healthChecks need in a Module
	}
	if b := k.PostBuild; b != nil {
		p.Substitute, p.SubstituteFrom = b.Substitute, b.SubstituteFrom
		valuesObjects("spec.postBuild.substituteFrom", b.SubstituteFrom, c, func(r fleeetv1.SubstituteReference) (string, string) { return r.Kind, r.Name })
	}
	if d := k.Decryption; d != nil {
		switch {
		case d.Provider != "sops":
			c.refuse("spec.decryption.provider %q: Flux decrypts with sops only", d.Provider)
		case d.SecretRef == nil:
			c.refuse("spec.decryption: a Module decrypts with the keys of a Secret it names; the controller's own keys are not the tenant's")
		default:
			p.Decryption = &fleeetv1.KustomizeDecryption{SecretRef: *c.deliver(d.SecretRef)}
		}
	}
	spec.Sync.Package.Kustomize = p
	spec.Sync.DependsOn = dependsOn(o, k.DependsOn, c)
	spec.Sync.Interval = atLeast("spec.interval", k.Interval, time.Minute, c)
	spec.Sync.RetryInterval = atLeast("spec.retryInterval", k.RetryInterval, 10*time.Second, c)
	spec.Suspend = k.Suspend
	return spec
}

// v1Patches returns k's patches with its v1beta2 patchesStrategicMerge and
// patchesJson6902 appended as entries of them, as Flux v1 reads them: a
// strategic merge patch applies to the object it names, a JSON 6902 patch
// to its target.
func v1Patches(k *kustomizationSpec, c *conversion) []fleeetv1.KustomizePatch {
	patches := k.Patches
	for i, smp := range k.PatchesStrategicMerge {
		patches = append(patches, fleeetv1.KustomizePatch{Patch: string(smp.Raw)})
		c.rewrite("spec.patchesStrategicMerge[%d] is an entry of spec.patches, Flux v1's form", i)
	}
	for i, p := range k.PatchesJSON6902 {
		ops, err := json.Marshal(p.Patch)
		if err != nil || len(p.Patch) == 0 || p.Target == nil {
			c.refuse("spec.patchesJson6902[%d]: a JSON 6902 patch needs operations and a target", i)
			continue
		}
		patches = append(patches, fleeetv1.KustomizePatch{Patch: string(ops), Target: p.Target})
		c.rewrite("spec.patchesJson6902[%d] is an entry of spec.patches, Flux v1's form", i)
	}
	return patches
}

// helmReleaseSpec holds the fields of a HelmRelease's spec (v2 and
// v2beta2) that a Module says.
type helmReleaseSpec struct {
	Chart *struct {
		Spec struct {
			Chart     string    `json:"chart"`
			Version   string    `json:"version"`
			SourceRef sourceRef `json:"sourceRef"`
		} `json:"spec"`
	} `json:"chart"`
	ChartRef         *sourceRef                   `json:"chartRef"`
	ReleaseName      string                       `json:"releaseName"`
	TargetNamespace  string                       `json:"targetNamespace"`
	StorageNamespace string                       `json:"storageNamespace"`
	Values           *apiextensionsv1.JSON        `json:"values"`
	ValuesFrom       []fleeetv1.ValuesReference   `json:"valuesFrom"`
	DependsOn        []dependency                 `json:"dependsOn"`
	Interval         *metav1.Duration             `json:"interval"`
	Timeout          *metav1.Duration             `json:"timeout"`
	DriftDetection   *fleeetv1.HelmDriftDetection `json:"driftDetection"`
	Suspend          bool                         `json:"suspend"`
	Install          *struct {
		CRDs            fleeetv1.HelmCRDsPolicy `json:"crds"`
		CreateNamespace bool                    `json:"createNamespace"`
		Remediation     *struct {
			Retries *int32 `json:"retries"`
		} `json:"remediation"`
	} `json:"install"`
	Upgrade *struct {
		CRDs        fleeetv1.HelmCRDsPolicy `json:"crds"`
		Remediation *struct {
			Retries              *int32                           `json:"retries"`
			Strategy             fleeetv1.HelmRemediationStrategy `json:"strategy"`
			RemediateLastFailure *bool                            `json:"remediateLastFailure"`
		} `json:"remediation"`
	} `json:"upgrade"`
	PostRenderers []struct {
		Kustomize struct {
			Patches []fleeetv1.KustomizePatch `json:"patches"`
			Images  []json.RawMessage         `json:"images"`
		} `json:"kustomize"`
	} `json:"postRenderers"`
}

var helmReleaseFields = fields(
	"chart chartRef releaseName targetNamespace storageNamespace values valuesFrom dependsOn interval timeout "+
		"driftDetection suspend install upgrade postRenderers",
	map[string]verdict{
		"serviceAccountName": {drop: whyServiceAccount},
		"maxHistory":         {drop: whyNoField},
		"persistentClient":   {drop: whyNoField},
		"test":               {drop: whyNoField},
		"rollback":           {drop: whyNoField},
		"uninstall":          {drop: whyNoField},
		"kubeConfig":         {refuse: whyKubeConfig},
		"commonMetadata":     {refuse: whyNoField},
	})

var (
	chartFields = fields("chart version sourceRef", map[string]verdict{
		"interval":          {drop: "the Module's spec.sync.interval checks the chart"},
		"reconcileStrategy": {drop: "a Module pins its chart's version"},
		"valuesFiles":       {refuse: whyNoField},
		"valuesFile":        {refuse: whyNoField},
		"verify":            {refuse: whyNoField},
	})
	// helmActionFields are what Flux's install and upgrade options share:
	// how Helm acts, not what it installs.
	helmActionFields = map[string]verdict{
		"disableWait": {drop: whyNoField}, "disableWaitForJobs": {drop: whyNoField}, "disableHooks": {drop: whyNoField},
		"disableOpenAPIValidation": {drop: whyNoField}, "disableSchemaValidation": {drop: whyNoField},
		"timeout": {drop: "spec.timeout bounds each action"},
	}
	installFields = fields("crds createNamespace remediation", helmActionFields, map[string]verdict{
		"replace": {drop: whyNoField}, "skipCRDs": {refuse: "a v2beta1 field: write install.crds: Skip"},
	})
	upgradeFields = fields("crds remediation", helmActionFields, map[string]verdict{
		"force": {drop: whyNoField}, "preserveValues": {drop: whyNoField}, "cleanupOnFail": {drop: whyNoField},
	})
)

// helmRelease converts a HelmRelease into a helm sync of its chart's
// source.
func (i *importer) helmRelease(ctx context.Context, o *object, c *conversion) *fleeetv1.ModuleSpec {
	c.check("spec", o.Spec, helmReleaseFields)
	var h helmReleaseSpec
	var raw struct {
		Chart struct {
			Spec json.RawMessage `json:"spec"`
		} `json:"chart"`
		Install json.RawMessage `json:"install"`
		Upgrade json.RawMessage `json:"upgrade"`
	}
	if err := json.Unmarshal(o.Spec, &h); err != nil {
		c.refuse("spec: %v", err)
		return nil
	}
	_ = json.Unmarshal(o.Spec, &raw) // decoded above
	c.check("spec.chart.spec", raw.Chart.Spec, chartFields)
	c.check("spec.install", raw.Install, installFields)
	c.check("spec.upgrade", raw.Upgrade, upgradeFields)

	spec := &fleeetv1.ModuleSpec{}
	p := &fleeetv1.HelmPackage{
		ReleaseName: h.ReleaseName, TargetNamespace: h.TargetNamespace, StorageNamespace: h.StorageNamespace,
		Values: h.Values, ValuesFrom: h.ValuesFrom, Timeout: h.Timeout, DriftDetection: h.DriftDetection,
	}
	switch {
	case h.Chart != nil:
		cs := h.Chart.Spec
		switch src := i.lookup(o, "spec.chart.spec.sourceRef", cs.SourceRef, c, "HelmRepository", "GitRepository"); {
		case src == nil:
		case src.Kind == "GitRepository":
			spec.Sync.Source, spec.VersionPolicy = i.gitSource(ctx, src, c)
			p.Chart = cs.Chart
		default:
			spec.Sync.Source, spec.VersionPolicy = i.helmSource(ctx, src, cs.Chart, cs.Version, c)
		}
	case h.ChartRef != nil:
		if src := i.lookup(o, "spec.chartRef", *h.ChartRef, c, "OCIRepository"); src != nil {
			spec.Sync.Source, spec.VersionPolicy = i.ociSource(ctx, src, c)
		}
	default:
		c.refuse("spec: neither chart nor chartRef is set")
	}
	valuesObjects("spec.valuesFrom", h.ValuesFrom, c, func(r fleeetv1.ValuesReference) (string, string) { return r.Kind, r.Name })
	if in := h.Install; in != nil {
		p.CRDs, p.CreateNamespace = in.CRDs, in.CreateNamespace
		if in.Remediation != nil && in.Remediation.Retries != nil {
			p.Remediation = &fleeetv1.HelmRemediation{InstallRetries: in.Remediation.Retries}
		}
	}
	if up := h.Upgrade; up != nil {
		if up.CRDs != "" && p.CRDs != "" && up.CRDs != p.CRDs {
			c.rewrite("spec.upgrade.crds %s: a Module has one crds policy for install and upgrade; it takes install's, %s", up.CRDs, p.CRDs)
		}
		p.CRDs = cmp.Or(p.CRDs, up.CRDs)
		if r := up.Remediation; r != nil {
			p.Remediation = cmp.Or(p.Remediation, &fleeetv1.HelmRemediation{})
			p.Remediation.UpgradeRetries, p.Remediation.Strategy, p.Remediation.RemediateLastFailure = r.Retries, r.Strategy, r.RemediateLastFailure
		}
	}
	for n, r := range h.PostRenderers {
		if len(r.Kustomize.Images) > 0 {
			c.refuse("spec.postRenderers[%d].kustomize.images: a Module's post-renderers are patches only", n)
		}
		p.PostRenderers = append(p.PostRenderers, r.Kustomize.Patches...)
	}
	spec.Sync.Package.Helm = p
	spec.Sync.DependsOn = dependsOn(o, h.DependsOn, c)
	spec.Sync.Interval, spec.Suspend = atLeast("spec.interval", h.Interval, time.Minute, c), h.Suspend
	return spec
}

// valuesObjects notes where the ConfigMaps and Secrets that values or
// substitution variables are read from must be: downstream, in the tenant
// namespace, where the Module delivers the Secrets.
func valuesObjects[R any](field string, refs []R, c *conversion, kindName func(R) (string, string)) {
	for _, r := range refs {
		switch kind, name := kindName(r); kind {
		case "Secret":
			c.deliver(&fleeetv1.LocalObjectReference{Name: name})
			c.rewrite("%s Secret %s: delivered from the tenant namespace (spec.sync.secrets)", field, name)
		default:
			c.rewrite("%s %s %s: read in the tenant namespace of each cluster, where it must exist", field, kind, name)
		}
	}
}
