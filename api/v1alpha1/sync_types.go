package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SyncSpec is one exactly-versioned Flux sync: where the configuration comes
// from (Source), how it is applied (Package), which values are bound into it
// downstream (Bindings) and which other syncs must be ready first (DependsOn).
//
// A helm source is installed with a helm package; a git or oci source is
// applied with either package, a git source naming its chart's path in
// package.helm.chart.
//
// +kubebuilder:validation:XValidation:rule="!has(self.source.helm) || has(self.package.helm)",message="a helm source is installed with a helm package"
// +kubebuilder:validation:XValidation:rule="!has(self.source.git) || !has(self.package.helm) || has(self.package.helm.chart)",message="package.helm.chart must name the chart's path in the git source"
// +kubebuilder:validation:XValidation:rule="!has(self.package.helm) || !has(self.package.helm.chart) || has(self.source.git)",message="package.helm.chart is only for a git source: a helm source names its chart in source.helm.chart and an oci source is the chart"
type SyncSpec struct {
	// Source is the exact version of the configuration to apply.
	// +required
	Source Source `json:"source,omitzero"`

	// Package says how the source is applied downstream.
	// +required
	Package Package `json:"package,omitzero"`

	// Bindings are values resolved in the downstream cluster and substituted
	// for $(NAME) in package.kustomize.substitute values and in string leaves
	// of package.helm.values. A binding may mention bindings listed before it.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Bindings []Binding `json:"bindings,omitempty"`

	// Secrets are Secrets of the Module's namespace on the management
	// cluster that the fleet delivers, under the same name, into the tenant
	// namespace of every cluster this sync is placed on, before the sync is
	// applied. Only Secrets labelled fleeet.dev/deliverable=true are
	// delivered. Fields naming Secrets downstream, such as
	// source.secretRef, name a delivered Secret like any other.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Secrets []SecretDelivery `json:"secrets,omitempty"`

	// DependsOn lists the syncs that must be Ready, at their current desired
	// revision, before this sync is applied or updated. Dependencies may be
	// of either kind: a kustomize sync can wait for a helm sync and the reverse.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	DependsOn []Dependency `json:"dependsOn,omitempty"`

	// RequiredBy declares the dependency from its own side: every other
	// sync of the same plan whose labels it selects waits for this one, as
	// if it listed it in dependsOn ({} selects all, so everything waits
	// for a CNI). Where this sync is not placed, nothing waits for it.
	// Agents older than the manager that introduced it ignore it.
	// +optional
	RequiredBy *metav1.LabelSelector `json:"requiredBy,omitempty"`

	// Interval is how often Flux checks the source and re-applies the sync
	// without any change, which repairs drift. 10m unless set; at least 1m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="must be at least 1m"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// RetryInterval is how soon Flux tries a failed Kustomization again.
	// 1m unless set; at least 10s. A HelmRelease retries as its
	// remediation says instead.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="must be at least 10s"
	RetryInterval *metav1.Duration `json:"retryInterval,omitempty"`
}

// SecretDelivery names one Secret to deliver. There is no namespace field:
// only Secrets of the Module's own namespace can be named.
type SecretDelivery struct {
	// Name of the Secret, the same on the management cluster and downstream.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// NamedSync is a SyncSpec with the name and labels it carries inside an
// assemblage. The manager names each sync after the Module it was compiled from
// and copies the Module's labels, so dependency selectors written against
// Modules select the same syncs downstream.
//
// +kubebuilder:validation:XValidation:rule="!has(self.content)",message="content is resolved before a plan reaches a cluster: an Assemblage holds every sync whole"
type NamedSync struct {
	// Name identifies the sync within its assemblage.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Labels are matched by dependsOn label selectors.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Content, set only in plans on the management cluster, names the
	// CompiledSync in the plan's namespace that holds this sync: the entry
	// then carries only its name and the Secrets delivered for it, and a
	// reader of the plan takes the rest from the CompiledSync. An Assemblage
	// never carries it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Content string `json:"content,omitempty"`

	SyncSpec `json:",inline"`
}

// Source is where a sync's configuration comes from, at one exact version.
// Exactly one of git, helm or oci is set.
//
// +kubebuilder:validation:XValidation:rule="[has(self.git), has(self.helm), has(self.oci)].filter(x, x).size() == 1",message="exactly one of git, helm or oci must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.git) || !self.git.url.startsWith('ssh://') || has(self.secretRef)",message="an ssh:// git source needs secretRef naming a Secret with identity and known_hosts: the host key is always checked"
// +kubebuilder:validation:XValidation:rule="!has(self.certSecretRef) || !has(self.git)",message="certSecretRef is for helm and oci sources; a git source reads ca.crt from the secretRef Secret"
type Source struct {
	// Git is a git repository at a tag or a full commit.
	// +optional
	Git *GitSource `json:"git,omitempty"`

	// Helm is a Helm chart at an exact version.
	// +optional
	Helm *HelmSource `json:"helm,omitempty"`

	// OCI is an OCI artifact at an exact tag or digest: Flux's kustomize
	// artifact format for a kustomize package, a Helm chart for a helm
	// package.
	// +optional
	OCI *OCISource `json:"oci,omitempty"`

	// SecretRef names a Secret in the downstream namespace that holds the
	// credentials for the source: one created there, or one the sync
	// delivers (secrets). Flux's formats: for git over https, username and
	// password, or bearerToken (and ca.crt for a private CA); for git over
	// ssh, identity and known_hosts; for helm, username and password, or a
	// kubernetes.io/dockerconfigjson Secret for oci:// repositories; for oci,
	// a kubernetes.io/dockerconfigjson Secret. Only the name travels in plans.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// CertSecretRef names a Secret in the downstream namespace with the
	// ca.crt (and, for client certificates, tls.crt and tls.key) a helm or
	// oci source's server is checked against, for servers with a private CA.
	// +optional
	CertSecretRef *LocalObjectReference `json:"certSecretRef,omitempty"`
}

// GitSource is a git repository pinned to a tag or a full 40-hex commit.
// Branches are not accepted: a sync must name exactly what it applies.
//
// +kubebuilder:validation:XValidation:rule="has(self.tag) != has(self.revision)",message="exactly one of tag or revision must be set; branches are not accepted"
type GitSource struct {
	// URL of the repository: https://, http:// or ssh://.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https?|ssh)://\S+$`
	URL string `json:"url"`

	// Tag is the git tag to check out, such as v1.2.3 or refs/tags/v1.2.3.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[^\s~^:?*\[\\]+$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('refs/') || self.startsWith('refs/tags/')",message="must name a tag, not a branch or another ref"
	Tag string `json:"tag,omitempty"`

	// Revision is the full 40-hex SHA-1 of the commit to check out.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-f]{40}$')",message="must be a full 40-character lower-case hex commit SHA"
	// +kubebuilder:validation:MaxLength=40
	Revision string `json:"revision,omitempty"`

	// Ignore excludes files from the fetched source, in .gitignore syntax,
	// such as files that are not manifests. Flux's defaults (.git, CI
	// configuration, …) are excluded too.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Ignore *string `json:"ignore,omitempty"`
}

// OCISource is an OCI artifact pinned to a tag or a digest. A tag must not
// move: latest is refused as a branch is.
//
// +kubebuilder:validation:XValidation:rule="has(self.tag) != has(self.digest)",message="exactly one of tag or digest must be set"
type OCISource struct {
	// URL of the artifact's repository: oci://host/path, without tag or digest.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^oci://[^\s@]+$`
	// +kubebuilder:validation:XValidation:rule="!self.substring(6).matches('.*/[^/]*:[^/]*$')",message="must not carry a tag; set tag or digest instead"
	URL string `json:"url"`

	// Tag of the artifact, such as 1.2.3. For a helm package it is the
	// chart's version, as helm push names it.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`
	// +kubebuilder:validation:XValidation:rule="self != 'latest'",message="latest moves; name an exact tag or a digest"
	Tag string `json:"tag,omitempty"`

	// Digest of the artifact's manifest: sha256: and 64 hex characters.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	// +kubebuilder:validation:XValidation:rule="self.matches('^sha256:[0-9a-f]{64}$')",message="must be sha256: followed by 64 lower-case hex characters"
	Digest string `json:"digest,omitempty"`

	// Insecure fetches the artifact over plain HTTP, only where the tenant
	// namespace carries the annotation fleeet.dev/allow-insecure-http:
	// "true" (a registry on a private network without TLS).
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// Verify makes Flux check the artifact's cosign signature before
	// using it.
	// +optional
	Verify *OCIVerification `json:"verify,omitempty"`
}

// OCIVerification says how an OCI artifact's signature is checked.
type OCIVerification struct {
	// SecretRef names a Secret in the downstream namespace whose keys
	// ending in .pub are the cosign public keys a signature must match.
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// HelmSource is a chart in a Helm repository (https or oci) at an exact version.
type HelmSource struct {
	// URL of the chart repository: https://, http:// or oci://.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https?|oci)://\S+$`
	URL string `json:"url"`

	// Chart is the name of the chart in the repository.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Chart string `json:"chart"`

	// Version is the exact semantic version of the chart, such as 1.2.3.
	// Ranges and wildcards are not accepted.
	// +required
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^v?(0|[1-9][0-9]*)[.](0|[1-9][0-9]*)[.](0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?([+][0-9A-Za-z.-]+)?$')",message="must be an exact semantic version such as 1.2.3, not a range"
	Version string `json:"version"`
}

// Package says how a source is applied. Exactly one of kustomize or helm is set.
//
// +kubebuilder:validation:XValidation:rule="has(self.kustomize) != has(self.helm)",message="exactly one of kustomize or helm must be set"
type Package struct {
	// Kustomize applies a path of a git or oci source as a Flux Kustomization.
	// +optional
	Kustomize *KustomizePackage `json:"kustomize,omitempty"`

	// Helm installs a chart of a helm, oci or git source as a Flux HelmRelease.
	// +optional
	Helm *HelmPackage `json:"helm,omitempty"`
}

// KustomizePackage is applied as a Flux Kustomization.
//
// +kubebuilder:validation:XValidation:rule="!has(self.healthChecks) || (has(self.wait) && !self.wait)",message="healthChecks need wait: false; with wait, Flux checks every applied object and ignores healthChecks",fieldPath=".healthChecks"
type KustomizePackage struct {
	// Path to the kustomization inside the repository.
	// +optional
	// +kubebuilder:default="./"
	// +kubebuilder:validation:MaxLength=1024
	Path string `json:"path,omitempty"`

	// Substitute holds variables for Flux post-build substitution; values may
	// mention bindings as $(NAME).
	// +optional
	Substitute map[string]string `json:"substitute,omitempty"`

	// Patches are kustomize patches (strategic merge or JSON 6902) applied to
	// the built manifests, in order, before post-build substitution: a
	// ${VAR} in a patch is substituted like one in the manifests, which is
	// how a patch takes a binding (substitute: {VAR: $(NAME)}). $(NAME) in a
	// patch is left alone: it is Kubernetes' own syntax in command and args.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Patches []KustomizePatch `json:"patches,omitempty"`

	// Images set the name, tag or digest of container images in the built
	// manifests.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Images []KustomizeImage `json:"images,omitempty"`

	// Components are paths, relative to path, of kustomize components
	// included in the build.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	Components []string `json:"components,omitempty"`

	// SubstituteFrom names ConfigMaps and Secrets in the downstream tenant
	// namespace whose data are post-build substitution variables, in order,
	// a later one winning; substitute wins over all of them. A Secret
	// delivered with sync.secrets arrives there under the same name.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	SubstituteFrom []SubstituteReference `json:"substituteFrom,omitempty"`

	// TargetNamespace sets the namespace of every namespaced object applied.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// Prune deletes objects that were applied before and are gone from the
	// source; on unless set to false.
	// +optional
	// +kubebuilder:default=true
	Prune *bool `json:"prune,omitempty"`

	// Wait makes the sync Ready only once every object it applied is ready
	// (kstatus Current: a Deployment rolled out with its pods ready, a Job
	// complete), so its dependents and a rollout wait for workloads that
	// run, not only for an apply that succeeded. Past timeout the sync is
	// Failed with what was not ready, and Flux checks again a minute later.
	// On unless set to false; off, the sync is Ready once applied.
	// +optional
	// +kubebuilder:default=true
	Wait *bool `json:"wait,omitempty"`

	// Timeout bounds building, applying and, with wait, waiting for the
	// applied objects to be ready. 5m unless set; Flux never waits less
	// than 30s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// Decryption decrypts SOPS-encrypted manifests before they are
	// applied; kustomize-controller does the decrypting downstream.
	// +optional
	Decryption *KustomizeDecryption `json:"decryption,omitempty"`

	// Force recreates an object whose change the apiserver refuses because
	// it touches an immutable field (a Job's template, a Service's
	// clusterIP, a Deployment's selector): the object is deleted and
	// created anew, so its pods restart. Off unless set to true.
	// +optional
	Force *bool `json:"force,omitempty"`

	// HealthChecks are further objects, not applied by this sync, that
	// must be ready (kstatus Current) before it is Ready, such as a
	// HelmRelease another tool installs. They are read as the tenant's
	// ServiceAccount.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	HealthChecks []HealthCheckReference `json:"healthChecks,omitempty"`

	// HealthCheckExprs say, in CEL, when objects of a kind that kstatus
	// does not understand (a custom resource with its own status) are
	// ready or failed; they apply to what wait and healthChecks read.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	HealthCheckExprs []HealthCheckExpr `json:"healthCheckExprs,omitempty"`
}

// KustomizeDecryption names the Secret holding the keys that decrypt a
// kustomize sync's SOPS-encrypted manifests.
type KustomizeDecryption struct {
	// SecretRef names a Secret in the tenant's downstream namespace (one
	// the Module delivers, or one made there) whose keys ending in .agekey
	// are age private keys (.gpg, .vault-token and the cloud KMS keys
	// kustomize-controller knows work too).
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// HealthCheckReference names one object whose readiness a kustomize sync
// waits for.
type HealthCheckReference struct {
	// APIVersion of the object, such as helm.toolkit.fluxcd.io/v2.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion,omitempty"`

	// Kind of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`

	// Name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Namespace of the object. Unless set, the sync's targetNamespace, or,
	// without one, the tenant namespace downstream that the sync's Flux
	// objects live in.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// HealthCheckExpr says in CEL when objects of one kind are ready, still
// progressing or failed. Each expression sees the object as self.
type HealthCheckExpr struct {
	// APIVersion of the objects, such as example.com/v1.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`

	// Kind of the objects.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`

	// Current is true when an object is ready.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Current string `json:"current"`

	// InProgress is true while an object is still progressing.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	InProgress string `json:"inProgress,omitempty"`

	// Failed is true when an object failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Failed string `json:"failed,omitempty"`
}

// HelmPackage is installed as a Flux HelmRelease.
type HelmPackage struct {
	// ReleaseName of the Helm release; defaults to the sync's name.
	// +optional
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ReleaseName string `json:"releaseName,omitempty"`

	// Chart is the path of the chart's directory in a git source, such as
	// charts/podinfo; set only for a git source.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.](/|$)')",message="must stay inside the repository"
	Chart string `json:"chart,omitempty"`

	// TargetNamespace is the namespace the release is installed into.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// StorageNamespace is the namespace Helm keeps the release's history
	// in; the downstream tenant namespace unless set. Set it to the
	// targetNamespace to take over a release made with `helm install`
	// there (which keeps its history in the release's own namespace):
	// helm-controller then upgrades that release instead of installing a
	// second one over it.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	StorageNamespace string `json:"storageNamespace,omitempty"`

	// Values for the chart; string leaves may mention bindings as $(NAME).
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`

	// ValuesFrom merges values from ConfigMaps and Secrets in the downstream
	// tenant namespace, in order, a later one winning; values wins over all
	// of them. A Secret delivered with sync.secrets arrives there under the
	// same name.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	ValuesFrom []ValuesReference `json:"valuesFrom,omitempty"`

	// Timeout bounds each Helm action (install, upgrade, rollback,
	// uninstall), including Helm's wait for the release's objects to be
	// ready: an install or upgrade whose workloads are not ready by then
	// failed, and is remediated. 5m unless set.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// Remediation says how Flux recovers from a failed install or upgrade.
	// Absent, every default below applies: a failed install or upgrade is
	// tried 3 more times, and a failed upgrade is rolled back, the last one
	// too, so the release keeps running its last good version.
	// +optional
	Remediation *HelmRemediation `json:"remediation,omitempty"`

	// DriftDetection says what happens when the release's objects in the
	// cluster no longer match what Helm installed (someone ran kubectl
	// edit): absent, drift is detected and corrected, as a GitOps user
	// expects of a cluster that git describes. Drift is reported in the
	// sync's status either way.
	// +optional
	DriftDetection *HelmDriftDetection `json:"driftDetection,omitempty"`

	// CRDs is how the chart's crds/ directory is handled: Skip, Create
	// (install CRDs missing from the cluster, at install and upgrade) or
	// CreateReplace (also replace CRDs that changed). Absent,
	// helm-controller's default applies: Create, at install and at upgrade
	// alike (its API's "not applied during upgrade" is not what 1.6 does).
	// +optional
	CRDs HelmCRDsPolicy `json:"crds,omitempty"`

	// CreateNamespace makes Helm create targetNamespace at install when it
	// is missing. Helm creates it without labels, as the ServiceAccount the
	// sync runs as, which needs the right to create namespaces.
	// +optional
	CreateNamespace bool `json:"createNamespace,omitempty"`

	// PostRenderers are kustomize patches applied to the chart's rendered
	// manifests before Helm installs them, for what the chart's values do
	// not expose. They are not expanded: $(NAME) in a manifest is
	// Kubernetes' own syntax.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	PostRenderers []KustomizePatch `json:"postRenderers,omitempty"`
}

// KustomizePatch is a strategic merge or JSON 6902 patch, applied to the
// objects target selects, or to the object the patch names.
type KustomizePatch struct {
	// Patch is the patch document, YAML or JSON.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32768
	Patch string `json:"patch"`

	// Target selects the objects to patch.
	// +optional
	Target *PatchTarget `json:"target,omitempty"`
}

// HelmDriftMode is what helm-controller does about drift.
// +kubebuilder:validation:Enum=Enabled;Warn;Disabled
type HelmDriftMode string

const (
	// DriftEnabled detects drift and corrects it.
	DriftEnabled HelmDriftMode = "Enabled"
	// DriftWarn detects drift and reports it, leaving it in place.
	DriftWarn HelmDriftMode = "Warn"
	// DriftDisabled neither detects nor corrects drift.
	DriftDisabled HelmDriftMode = "Disabled"
)

// HelmDriftDetection configures helm-controller's drift detection.
type HelmDriftDetection struct {
	// Mode is Enabled (detect and correct, the default), Warn (detect and
	// report only) or Disabled.
	// +optional
	Mode HelmDriftMode `json:"mode,omitempty"`

	// Ignore lists fields that may differ without counting as drift, such
	// as a Deployment's replicas that an autoscaler sets.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Ignore []HelmDriftIgnoreRule `json:"ignore,omitempty"`
}

// HelmDriftIgnoreRule names fields that drift detection ignores.
type HelmDriftIgnoreRule struct {
	// Paths are JSON pointers (RFC 6901) to the ignored fields, such as
	// /spec/replicas.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:Pattern=`^(/([^~/]|~[01])*)+$`
	Paths []string `json:"paths"`

	// Target selects the objects whose fields are ignored; every object of
	// the release unless set.
	// +optional
	Target *PatchTarget `json:"target,omitempty"`
}

// PatchTarget selects the objects a patch applies to; every field set must
// match.
type PatchTarget struct {
	// Group of the objects' API, such as apps.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`

	// Version of the objects' API, such as v1.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Version string `json:"version,omitempty"`

	// Kind of the objects, such as Deployment.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind,omitempty"`

	// Name of the objects; a regular expression.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// Namespace of the objects; a regular expression.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Namespace string `json:"namespace,omitempty"`

	// LabelSelector over the objects' labels, such as app=web.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LabelSelector string `json:"labelSelector,omitempty"`

	// AnnotationSelector over the objects' annotations.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	AnnotationSelector string `json:"annotationSelector,omitempty"`
}

// KustomizeImage rewrites the container images called name.
//
// +kubebuilder:validation:XValidation:rule="has(self.newName) || has(self.newTag) || has(self.digest)",message="set at least one of newName, newTag or digest"
type KustomizeImage struct {
	// Name of the image as the manifests write it, without tag or digest.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Name string `json:"name"`

	// NewName replaces the image's name.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	NewName string `json:"newName,omitempty"`

	// NewTag replaces the image's tag.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	NewTag string `json:"newTag,omitempty"`

	// Digest replaces the image's tag with a digest, such as sha256:….
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+:[a-f0-9]{32,}$`
	Digest string `json:"digest,omitempty"`
}

// SubstituteReference names a ConfigMap or Secret in the downstream tenant
// namespace whose data are post-build substitution variables.
type SubstituteReference struct {
	// Kind is ConfigMap or Secret.
	// +required
	// +kubebuilder:validation:Enum=ConfigMap;Secret
	Kind string `json:"kind"`

	// Name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Optional lets the sync go ahead while the object is missing; otherwise
	// it fails, naming the object.
	// +optional
	Optional bool `json:"optional,omitempty"`
}

// ValuesReference names a ConfigMap or Secret in the downstream tenant
// namespace holding Helm values.
type ValuesReference struct {
	// Kind is ConfigMap or Secret.
	// +required
	// +kubebuilder:validation:Enum=ConfigMap;Secret
	Kind string `json:"kind"`

	// Name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// ValuesKey is the data key holding the values: a YAML document, or, with
	// targetPath, one value. values.yaml unless set.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[\-._a-zA-Z0-9]+$`
	ValuesKey string `json:"valuesKey,omitempty"`

	// TargetPath is where the value of valuesKey goes, such as
	// ingress.hosts[0]; unset, valuesKey holds a whole values document.
	// +optional
	// +kubebuilder:validation:MaxLength=250
	// +kubebuilder:validation:Pattern=`^([a-zA-Z0-9_\-.\\\/]|\[[0-9]{1,5}\])+$`
	TargetPath string `json:"targetPath,omitempty"`

	// Optional lets the sync go ahead while the object or key is missing;
	// otherwise it fails, naming the object.
	// +optional
	Optional bool `json:"optional,omitempty"`
}

// HelmCRDsPolicy is how Helm handles a chart's CRDs.
// +kubebuilder:validation:Enum=Skip;Create;CreateReplace
type HelmCRDsPolicy string

const (
	// CRDsSkip neither installs nor upgrades the chart's CRDs.
	CRDsSkip HelmCRDsPolicy = "Skip"
	// CRDsCreate installs the chart's CRDs that are missing.
	CRDsCreate HelmCRDsPolicy = "Create"
	// CRDsCreateReplace installs missing CRDs and replaces changed ones.
	CRDsCreateReplace HelmCRDsPolicy = "CreateReplace"
)

// HelmRemediationStrategy is how a failed Helm upgrade is undone.
// +kubebuilder:validation:Enum=Rollback;Uninstall
type HelmRemediationStrategy string

const (
	// RollbackRemediation returns the release to its last release that
	// succeeded.
	RollbackRemediation HelmRemediationStrategy = "Rollback"
	// UninstallRemediation removes the release; Flux installs it again.
	UninstallRemediation HelmRemediationStrategy = "Uninstall"
)

// HelmRemediation says how Flux recovers from a failed Helm install or
// upgrade: how often it tries again and how it undoes a failure in between.
// Once the retries are used up the sync is Failed until its version or
// values change, which Flux tries afresh, or `fleetctl retry` resets the
// count.
//
// +kubebuilder:validation:XValidation:rule="!has(self.upgradeStrategy) || self.upgradeStrategy.name != 'RetryOnFailure' || !(has(self.upgradeRetries) || has(self.strategy) || has(self.remediateLastFailure))",message="upgradeRetries, strategy and remediateLastFailure undo a failed upgrade, which RetryOnFailure never does",fieldPath=".upgradeStrategy"
type HelmRemediation struct {
	// InstallRetries is how many more times a failed install is tried, the
	// failed release uninstalled before each try. 3 unless set; 0 gives up
	// at the first failure, -1 never gives up. The install that uses up the
	// retries is left in place, so its workloads say what went wrong.
	// +optional
	// +kubebuilder:validation:Minimum=-1
	// +kubebuilder:validation:Maximum=100
	InstallRetries *int32 `json:"installRetries,omitempty"`

	// UpgradeRetries is how many more times a failed upgrade is tried, the
	// failure remediated by strategy before each try. 3 unless set; 0 gives
	// up at the first failure, -1 never gives up.
	// +optional
	// +kubebuilder:validation:Minimum=-1
	// +kubebuilder:validation:Maximum=100
	UpgradeRetries *int32 `json:"upgradeRetries,omitempty"`

	// Strategy undoes a failed upgrade: Rollback (the default) or Uninstall.
	// +optional
	Strategy HelmRemediationStrategy `json:"strategy,omitempty"`

	// RemediateLastFailure undoes the upgrade that used up the retries too,
	// so the release is left at its last good version. On unless set to
	// false, which leaves the failed upgrade in place for inspection.
	// +optional
	RemediateLastFailure *bool `json:"remediateLastFailure,omitempty"`

	// UpgradeStrategy is what follows a failed upgrade: RemediateOnFailure
	// (the default) undoes it by strategy and tries again, upgradeRetries
	// times; RetryOnFailure leaves the failed upgrade in place and tries it
	// again every retryInterval, undoing nothing, for a release whose
	// rollback would do harm (its upgrade migrated a database).
	// +optional
	UpgradeStrategy *HelmUpgradeStrategy `json:"upgradeStrategy,omitempty"`
}

// HelmUpgradeStrategyName names Flux's strategy for a failed Helm upgrade.
// +kubebuilder:validation:Enum=RemediateOnFailure;RetryOnFailure
type HelmUpgradeStrategyName string

const (
	// RemediateOnFailure undoes a failed upgrade as the remediation says.
	RemediateOnFailure HelmUpgradeStrategyName = "RemediateOnFailure"
	// RetryOnFailure tries a failed upgrade again without undoing it.
	RetryOnFailure HelmUpgradeStrategyName = "RetryOnFailure"
)

// HelmUpgradeStrategy is Flux's upgrade strategy (spec.upgrade.strategy of
// a HelmRelease).
//
// +kubebuilder:validation:XValidation:rule="!has(self.retryInterval) || self.name == 'RetryOnFailure'",message="retryInterval needs name: RetryOnFailure"
type HelmUpgradeStrategy struct {
	// Name is RemediateOnFailure or RetryOnFailure.
	// +required
	Name HelmUpgradeStrategyName `json:"name"`

	// RetryInterval is how long after a failed upgrade RetryOnFailure tries
	// it again. 5m unless set; at least 10s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="must be at least 10s"
	RetryInterval *metav1.Duration `json:"retryInterval,omitempty"`
}

// Binding is a named value for $(NAME) mentions: a literal, or a field of an
// object in the downstream tenant namespace. Exactly one of value or
// objectFieldRef is set.
//
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.objectFieldRef)",message="exactly one of value or objectFieldRef must be set"
type Binding struct {
	// Name is what $(NAME) mentions.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`

	// Value is a literal; it may mention bindings listed before this one.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Value *string `json:"value,omitempty"`

	// ObjectFieldRef reads the value from an object in the tenant namespace.
	// +optional
	ObjectFieldRef *ObjectFieldRef `json:"objectFieldRef,omitempty"`
}

// ObjectFieldRef selects one field of one object by JSON pointer.
type ObjectFieldRef struct {
	// APIVersion of the object, such as v1 or apps/v1.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`

	// Kind of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`

	// Name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// FieldPath is a JSON pointer (RFC 6901) into the object, such as /data/region.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^(/([^~/]|~[01])*)+$`
	FieldPath string `json:"fieldPath"`
}

// Dependency names one sync, or selects syncs by label, that must be Ready
// first. Exactly one of name or selector is set.
//
// +kubebuilder:validation:XValidation:rule="has(self.name) != has(self.selector)",message="exactly one of name or selector must be set"
type Dependency struct {
	// Name of a sync in the same assemblage (for a Module: the Module's name).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// Selector selects syncs by their labels, such as every platform module.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// ReadyAt says at which version the dependency must be Ready: Desired
	// (the default), the version its plan asks for, so a dependent waits
	// through the dependency's upgrade; or Any, whatever version it runs,
	// as Flux's own dependsOn does, so a dependent need not wait for the
	// dependency's upgrade. A sync several entries select waits as the
	// strictest says. Agents older than the manager that introduced it
	// ignore it and wait for the desired version.
	// +optional
	// +kubebuilder:validation:Enum=Desired;Any
	ReadyAt DependencyReadiness `json:"readyAt,omitempty"`

	// ReadyExpr, when set, decides instead of kstatus when the dependency
	// is ready for this sync, as Flux's own dependsOn readyExpr does: a CEL
	// expression over `dep`, the dependency's Kustomization or HelmRelease
	// (metadata, spec, status), that must yield true, such as
	// `dep.status.history[0].chartVersion == "2.1.0"`. readyAt still says
	// whether the dependency must run its desired spec first. An expression
	// that fails (a field not there yet) counts as not ready, and says why;
	// each evaluation is bounded in cost. Agents older than the manager
	// that introduced it ignore it and wait for kstatus readiness.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ReadyExpr string `json:"readyExpr,omitempty"`
}

// DependencyReadiness is the version at which a dependency counts as Ready.
type DependencyReadiness string

const (
	// ReadyAtDesired: Ready at the version the dependency's plan asks for.
	ReadyAtDesired DependencyReadiness = "Desired"
	// ReadyAtAny: Ready at whatever version it runs.
	ReadyAtAny DependencyReadiness = "Any"
)

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// Name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// SecretKeyReference names one key of a Secret in the same namespace.
type SecretKeyReference struct {
	// Name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Key in the Secret's data.
	// +optional
	// +kubebuilder:default=value
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}
