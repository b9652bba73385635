package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SyncSpec is one exactly-versioned Flux sync: where the configuration comes
// from (Source), how it is applied (Package), which values are bound into it
// downstream (Bindings) and which other syncs must be ready first (DependsOn).
//
// A git source is applied with a kustomize package and a helm source with a
// helm package.
//
// +kubebuilder:validation:XValidation:rule="has(self.source.git) == has(self.package.kustomize)",message="a git source is applied with a kustomize package and a helm source with a helm package"
type SyncSpec struct {
	// Source is the exact version of the configuration to apply.
	// +required
	Source Source `json:"source"`

	// Package says how the source is applied downstream.
	// +required
	Package Package `json:"package"`

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

	SyncSpec `json:",inline"`
}

// Source is where a sync's configuration comes from, at one exact version.
// Exactly one of git or helm is set.
//
// +kubebuilder:validation:XValidation:rule="has(self.git) != has(self.helm)",message="exactly one of git or helm must be set"
type Source struct {
	// Git is a git repository at a tag or a full commit.
	// +optional
	Git *GitSource `json:"git,omitempty"`

	// Helm is a Helm chart at an exact version.
	// +optional
	Helm *HelmSource `json:"helm,omitempty"`

	// SecretRef names a Secret in the downstream namespace that holds the
	// credentials for the source: one created there, or one the sync
	// delivers (secrets). Only the name travels in plans.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
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
	// Kustomize applies a path of a git source as a Flux Kustomization.
	// +optional
	Kustomize *KustomizePackage `json:"kustomize,omitempty"`

	// Helm installs a helm source as a Flux HelmRelease.
	// +optional
	Helm *HelmPackage `json:"helm,omitempty"`
}

// KustomizePackage is applied as a Flux Kustomization.
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
}

// HelmPackage is installed as a Flux HelmRelease.
type HelmPackage struct {
	// ReleaseName of the Helm release; defaults to the sync's name.
	// +optional
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ReleaseName string `json:"releaseName,omitempty"`

	// TargetNamespace is the namespace the release is installed into.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// Values for the chart; string leaves may mention bindings as $(NAME).
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`

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
}

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
}

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
