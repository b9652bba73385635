package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ModuleSpec says which exactly-versioned sync runs on which Remotes and how
// a new version rolls out to them.
type ModuleSpec struct {
	SyncPlacement `json:",inline"`

	// Rollout says how a new version of the sync reaches the selected Remotes.
	// +optional
	// +kubebuilder:default={}
	Rollout Rollout `json:"rollout,omitempty"`

	// VersionPolicy lets the manager choose the sync's version: it reads the
	// versions the source offers (git tags, Helm chart versions or OCI
	// tags), picks the highest the policy allows (or the digest an OCI tag
	// names now) and writes it into the sync as an exact version, which
	// then rolls out like any other change. Plans only ever hold exact
	// versions.
	// +optional
	VersionPolicy *VersionPolicy `json:"versionPolicy,omitempty"`
}

// VersionPolicy says which versions of a Module's source the manager may
// pick: the highest satisfying a semver constraint, or the digest an OCI
// tag names.
//
// +kubebuilder:validation:XValidation:rule="has(self.semver) != has(self.digestOf)",message="exactly one of semver or digestOf must be set"
type VersionPolicy struct {
	// Semver is a semantic version constraint, such as ">=1.2.0 <2.0.0",
	// "~1.4" or "^2", that a picked version satisfies: git tags and OCI tags
	// are read as versions with or without a leading v, and those that are
	// not versions are ignored. Pre-releases are picked only when the
	// constraint names one, as in ">=1.5.0-rc.0".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Semver string `json:"semver,omitempty"`

	// DigestOf is a tag of the sync's OCI artifact, such as stable or
	// latest, whose digest the sync follows: the manager reads the digest
	// the tag names now and writes it into spec.sync.source.oci.digest
	// (replacing a tag the sync named), so clusters only ever get an exact
	// digest, rolled out like any other change.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`
	DigestOf string `json:"digestOf,omitempty"`

	// Interval between two looks at the source.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="must be at least 1m: each look reads the whole list of the source's versions"
	Interval *metav1.Duration `json:"interval,omitempty"`
}

// SyncPlacement is what Module and BootstrapModule share: a sync, the Remotes
// it is placed on, and the values bound into it for each of them.
//
// +kubebuilder:validation:XValidation:rule="!has(self.overrides) || self.overrides.all(o, has(self.sync.package.helm) ? !has(o.kustomize) : !has(o.helm))",message="an override's kind must match the sync's package: helm overrides for a helm package, kustomize overrides for a kustomize package",fieldPath=".overrides"
type SyncPlacement struct {
	// Sync is applied to every selected Remote, named after its Module.
	// +required
	Sync SyncSpec `json:"sync"`

	// Selector selects Remotes in the Module's namespace by label. Absent
	// selects none; {} selects all.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// ControlPlaneBindings are resolved in the management cluster for each
	// target Remote before the sync is compiled.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	ControlPlaneBindings []ControlPlaneBinding `json:"controlPlaneBindings,omitempty"`

	// Overrides change the sync for the Remotes their selectors pick. Every
	// override whose selector matches a Remote applies, in list order, so a
	// later one wins: helm values are deep-merged (objects merge key by key,
	// anything else is replaced, null deletes the key), kustomize patches
	// are appended after the sync's own, images replace the sync's entry of
	// the same name, substitute keys replace the sync's, and a path
	// replaces the sync's path. A change to an override rolls out like a
	// version change.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Overrides []Override `json:"overrides,omitempty"`

	// Suspend stops reconciling; what was applied stays as it is.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ControlPlaneBinding is a named value resolved in the management cluster: a
// literal, or a field of the target Remote or of a ConfigMap in the tenant
// namespace. Secrets are refused: secret material never enters a
// ProxyAssemblage; bind Secrets downstream with sync.bindings.
//
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.objectFieldRef)",message="exactly one of value or objectFieldRef must be set"
type ControlPlaneBinding struct {
	// Name is what $(NAME) mentions.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`

	// Value is a literal.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Value *string `json:"value,omitempty"`

	// ObjectFieldRef reads the value from the target Remote (its labels,
	// annotations, spec or status) or from a ConfigMap in the tenant namespace.
	// +optional
	ObjectFieldRef *ControlPlaneFieldRef `json:"objectFieldRef,omitempty"`
}

// ControlPlaneFieldRef selects one field of the target Remote or of a
// ConfigMap in the Module's namespace by JSON pointer.
//
// +kubebuilder:validation:XValidation:rule="self.kind != 'ConfigMap' || has(self.name)",message="a ConfigMap reference needs a name"
type ControlPlaneFieldRef struct {
	// Kind is Remote (the Remote being compiled for) or ConfigMap.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == 'Remote' || self == 'ConfigMap'",message="must be Remote or ConfigMap; Secrets are never read in the management cluster, bind them downstream with sync.bindings"
	Kind string `json:"kind"`

	// Name of the ConfigMap; unused for Remote.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// FieldPath is a JSON pointer (RFC 6901), such as /metadata/labels/region
	// or /data/region.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^(/([^~/]|~[01])*)+$`
	FieldPath string `json:"fieldPath"`
}

// Override changes a sync for the Remotes its selector picks: helm values
// for a helm package, or the path, kustomize patches, images and substitute
// values for a kustomize package. Strings may mention bindings as $(NAME)
// wherever the sync's own may.
//
// +kubebuilder:validation:XValidation:rule="has(self.helm) != has(self.kustomize)",message="exactly one of helm or kustomize must be set"
type Override struct {
	// Name identifies the override in fleetctl diff and the dashboard.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Selector picks Remotes by label among those the Module selects; {}
	// picks all of them.
	// +required
	Selector metav1.LabelSelector `json:"selector"`

	// Helm overrides a helm package.
	// +optional
	Helm *HelmOverride `json:"helm,omitempty"`

	// Kustomize overrides a kustomize package.
	// +optional
	Kustomize *KustomizeOverride `json:"kustomize,omitempty"`
}

// HelmOverride is what an override changes in a helm package.
type HelmOverride struct {
	// Values are deep-merged over the sync's values.
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`
}

// KustomizeOverride is what an override changes in a kustomize package.
type KustomizeOverride struct {
	// Path replaces the sync's path inside the repository, such as an
	// environment's overlay (deploy/overlays/prod); the same source and
	// version, another kustomization.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Path string `json:"path,omitempty"`

	// Patches are applied after the sync's own.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Patches []KustomizePatch `json:"patches,omitempty"`

	// Images replace the sync's images of the same name, or add to them.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Images []KustomizeImage `json:"images,omitempty"`

	// Substitute replaces the sync's substitute values of the same keys, or
	// adds to them.
	// +optional
	Substitute map[string]string `json:"substitute,omitempty"`
}

// RolloutStrategy names how a new version reaches the selected Remotes.
// +kubebuilder:validation:Enum=AllAtOnce;RollingUpdate
type RolloutStrategy string

const (
	// AllAtOnceStrategy moves every selected Remote to a new version at once.
	AllAtOnceStrategy RolloutStrategy = "AllAtOnce"
	// RollingUpdateStrategy moves at most maxUnavailable Remotes at a time.
	RollingUpdateStrategy RolloutStrategy = "RollingUpdate"
)

// Rollout says how a new version of a Module's sync reaches its Remotes.
// Under RollingUpdate the Remotes move stage by stage, at most
// maxUnavailable at a time; a Remote whose sync fails on the new version, or
// is not available within progressDeadlineSeconds, counts as failed, and
// once more than maxFailures have failed the rollout pauses (condition
// RolloutPaused) or rolls back (condition RolledBack), as onFailure says.
//
// +kubebuilder:validation:XValidation:rule="self.strategy == 'RollingUpdate' || (!has(self.stages) && !has(self.paused) && !has(self.maxFailures) && !has(self.progressDeadlineSeconds) && !has(self.windows))",message="stages, paused, maxFailures, progressDeadlineSeconds and windows need strategy RollingUpdate"
type Rollout struct {
	// Strategy is AllAtOnce or RollingUpdate.
	// +optional
	// +kubebuilder:default=AllAtOnce
	Strategy RolloutStrategy `json:"strategy,omitempty"`

	// MaxUnavailable is how many Remotes (an integer of at least 1, or a
	// percentage of the selected Remotes) may be moving to a new version at
	// once under RollingUpdate; a stage without its own maxUnavailable uses
	// it too, as a percentage of the stage's Remotes.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",message="must be an integer of at least 1 or a percentage from 1% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// MinReadySeconds is how long a Remote's sync must stay Ready, its pods
	// all ready, at the new version before the Remote counts as updated.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`

	// Stages split the rollout into ordered steps, each over the Remotes its
	// selector picks from those the Module selects (a Remote in several
	// stages belongs to the first; a Remote in none to a last, implicit
	// stage). A stage starts only once the one before it is complete: every
	// online Remote of it updated, its bake time over and its approval given.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Stages []RolloutStage `json:"stages,omitempty"`

	// ProgressDeadlineSeconds is how long a Remote may take, from reporting
	// the new version, to being available on it; past it the Remote counts as
	// failed. 0 waits for ever.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	ProgressDeadlineSeconds int32 `json:"progressDeadlineSeconds,omitempty"`

	// OnFailure is what happens once more than maxFailures Remotes failed:
	// Pause holds the rollout until the failing Remote is repaired or the
	// spec changes; Rollback puts every Remote on the failed version back on
	// the last version that was Ready across the fleet (status.history) and
	// holds there until the sync's spec changes.
	// +optional
	// +kubebuilder:default=Pause
	OnFailure FailurePolicy `json:"onFailure,omitempty"`

	// MaxFailures is how many Remotes (an integer, or a percentage of the
	// selected Remotes) may fail before onFailure applies; a failed Remote
	// within it counts as done.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="must be an integer of at least 0 or a percentage from 0% to 100%"
	MaxFailures *intstr.IntOrString `json:"maxFailures,omitempty"`

	// Paused stops Remotes from starting to move; those already moving
	// finish. It keeps the rollout's place: stages, approvals and admitted
	// Remotes stay as they are. This is the pause declared with the spec
	// (in git); fleetctl rollout pause sets the annotation fleeet.dev/pause
	// instead, which pauses the same way and which a GitOps tool applying
	// the spec leaves alone.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// Windows are when Remotes may start to move: outside every window
	// nothing new starts, and what is moving finishes. None means always.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	Windows []RolloutWindow `json:"windows,omitempty"`

	// HistoryLimit is how many versions status.history keeps.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	HistoryLimit int32 `json:"historyLimit,omitempty"`
}

// RolloutStage is one step of a staged rollout.
type RolloutStage struct {
	// Name identifies the stage in status, events and fleetctl rollout
	// approve.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Selector picks the stage's Remotes by label among those the Module
	// selects; {} picks all that no earlier stage picked.
	// +required
	Selector metav1.LabelSelector `json:"selector"`

	// MaxUnavailable is how many of the stage's Remotes (an integer of at
	// least 1, or a percentage of them) may move at once; the rollout's
	// maxUnavailable when unset.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:Pattern=`^(100|[1-9][0-9]?)%$`
	// +kubebuilder:validation:XValidation:rule="type(self) != int || self >= 1",message="must be an integer of at least 1 or a percentage from 1% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// PauseAfter is how long the stage bakes once every online Remote of it
	// is updated, before the next stage starts.
	// +optional
	PauseAfter *metav1.Duration `json:"pauseAfter,omitempty"`

	// Approval Manual holds the next stage until someone runs fleetctl
	// rollout approve (or sets the annotation fleeet.dev/approve to
	// "<revision>/<stage>").
	// +optional
	// +kubebuilder:default=Automatic
	Approval ApprovalPolicy `json:"approval,omitempty"`

	// Track names the sequence of stages this stage belongs to, such as a
	// region: the stages of one track go in the order listed, each once the
	// one before it is done, and tracks advance independently of each
	// other, each stage within its own maxUnavailable and every track within
	// the namespace's and the manager's budget. Stages without a track form
	// one track too. Remotes in no stage form a last stage that starts once
	// every track is done. A failure anywhere applies onFailure to the
	// whole Module.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Track string `json:"track,omitempty"`

	// Check is a query against the Prometheus-compatible server the manager
	// is given (--prometheus-url) that must hold before the stage counts
	// as done; before its approval, if it has one.
	// +optional
	Check *StageCheck `json:"check,omitempty"`
}

// StageCheck is a PromQL query that must hold, once every online Remote of
// its stage is updated and available, for a while without a break before
// the next stage starts. It holds while the instant query returns at least
// one sample (a scalar: one that is not 0), as a Prometheus alerting rule
// fires: write the condition that must be true as a filter, such as
// `sum(rate(http_requests_total{code=~"5..",cluster=~"$(REMOTES)"}[5m])) < 1`.
// $(REMOTES) is replaced by a regular expression matching the names of the
// stage's Remotes exactly. The manager asks at most every `for`/5 (5 to 30
// seconds). An answer that the query does not hold past timeout fails the
// stage: spec.rollout.onFailure applies. A server that cannot be reached,
// or refuses the query, holds the stage and fails nothing.
//
// +kubebuilder:validation:XValidation:rule="duration(self.timeout) == duration('0s') || duration(self.timeout) >= duration(self.__for__)",message="timeout must be 0 (wait for ever) or at least for"
type StageCheck struct {
	// Query is the PromQL expression, evaluated as an instant query.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query"`

	// For is how long the query must hold without a break.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('24h')",message="must be from 0s to 24h"
	For metav1.Duration `json:"for,omitempty"`

	// Timeout is how long the check may take to hold for `for`, from when
	// the stage's last Remote became available (or, for a check added to a
	// stage done already, from when the manager first asked); 0 waits for
	// ever.
	// +optional
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('168h')",message="must be from 0s to 168h"
	Timeout metav1.Duration `json:"timeout,omitempty"`
}

// RolloutWindow is a recurring span of time in which a rollout may move
// Remotes: it opens at each time of its cron schedule and stays open for
// its duration.
type RolloutWindow struct {
	// Schedule is a standard five-field cron expression (minute hour
	// day-of-month month day-of-week), such as "0 9 * * 1-5".
	// +required
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=128
	Schedule string `json:"schedule"`

	// Duration is how long the window stays open.
	// +required
	Duration metav1.Duration `json:"duration"`

	// TimeZone is an IANA time zone name, such as Europe/Berlin; UTC when
	// unset.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`
}

// ApprovalPolicy says whether a stage's end waits for a person.
// +kubebuilder:validation:Enum=Automatic;Manual
type ApprovalPolicy string

const (
	// AutomaticApproval ends a stage once it is updated and baked.
	AutomaticApproval ApprovalPolicy = "Automatic"
	// ManualApproval also waits for fleetctl rollout approve.
	ManualApproval ApprovalPolicy = "Manual"
)

// FailurePolicy says what a rollout does once too many Remotes failed.
// +kubebuilder:validation:Enum=Pause;Rollback
type FailurePolicy string

const (
	// PauseOnFailure holds the rollout where it is.
	PauseOnFailure FailurePolicy = "Pause"
	// RollbackOnFailure puts the Remotes that moved back on the last good
	// version.
	RollbackOnFailure FailurePolicy = "Rollback"
)

// Annotations on a Module that fleetctl rollout writes; each names the
// revision it is meant for, so it never applies to a later version.
const (
	// ApproveAnnotation is "<revision>/<stage>": the stage's manual approval.
	ApproveAnnotation = "fleeet.dev/approve"
	// UndoAnnotation is "<revision>": roll that revision back now.
	UndoAnnotation = "fleeet.dev/undo"
	// PauseAnnotation pauses a RollingUpdate as spec.rollout.paused does,
	// whatever the spec holds, until it is removed (fleetctl rollout
	// resume); its value, printable and at most 128 characters, says when
	// and why (fleetctl rollout pause writes "<RFC 3339 time>[: <reason>]").
	// Unlike approve and undo it names no revision: a pause holds every
	// version until lifted.
	PauseAnnotation = "fleeet.dev/pause"
	// PauseAnnotationMax is the most characters admission lets
	// PauseAnnotation hold.
	PauseAnnotationMax = 128
	// MaxMovingAnnotation on a tenant namespace caps how many Remotes its
	// Modules' rollouts may have moving at once, all together; set by the
	// platform team, which tenants cannot overrule.
	MaxMovingAnnotation = "fleeet.dev/max-moving"
)

// ModuleStatus is the observed state of a Module, aggregated from the
// ProxyAssemblages of its Remotes.
type ModuleStatus struct {
	// ObservedGeneration is the spec generation the status describes; -1
	// until the first reconcile.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`

	// Conditions: Ready, Reconciling, Stalled, RolloutPaused, RolledBack,
	// and VersionResolved for a Module with a version policy.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Version is the git tag, commit, chart version or OCI tag or digest the
	// Module rolls out.
	// +optional
	Version string `json:"version,omitempty"`

	// Summary counts the selected Remotes by the state of this Module's sync.
	// A change of the counts alone (and of the wording of conditions that
	// keep their status and reason) is written at most every 2 s; any other
	// change of the status is written at once, with the counts of the moment.
	// +optional
	Summary ModuleSummary `json:"summary,omitempty"`

	// Rollout is the state of the rollout of the current revision.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`

	// History lists the last versions that were Ready across the fleet or
	// were rolled back, newest first; a rollback returns to the newest
	// Succeeded one.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	History []RolloutRecord `json:"history,omitempty"`

	// VersionPolicy is what the manager last found and picked under
	// spec.versionPolicy.
	// +optional
	VersionPolicy *VersionPolicyStatus `json:"versionPolicy,omitempty"`
}

// VersionPolicyStatus is what the source offered under a Module's version
// policy and what the manager picked from it.
type VersionPolicyStatus struct {
	// Available is the highest version the source offered that satisfies
	// the policy, at the last look that could read it.
	// +optional
	Available string `json:"available,omitempty"`

	// Picked is the version the manager last wrote into the sync.
	// +optional
	Picked string `json:"picked,omitempty"`

	// PickedAt is when it wrote it.
	// +optional
	PickedAt *metav1.Time `json:"pickedAt,omitempty"`

	// Skipped are versions the policy allows that the manager does not
	// pick because their rollout was rolled back; a newer version is picked
	// instead once the source offers one.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Skipped []string `json:"skipped,omitempty"`
}

// RolloutStatus records where the rollout of the Module's current revision
// stands. Only the Remotes in flight are listed, so the status stays small
// however many Remotes the Module selects.
type RolloutStatus struct {
	// Revision being rolled out: a hash of the sync, its control-plane
	// bindings and its overrides, so a change to the rollout's own settings
	// keeps its place.
	Revision string `json:"revision"`

	// Admitted lists the Remotes allowed to move to this revision that do
	// not hold it yet.
	// +optional
	// +listType=set
	Admitted []string `json:"admitted,omitempty"`

	// Stage is the stage in progress, or holding the next one; with several
	// tracks, that of the first track (tracks has each one's).
	// +optional
	Stage string `json:"stage,omitempty"`

	// Tracks says, for a rollout whose stages form several tracks, the stage
	// in progress in each and what holds it, in the order their first
	// stages are listed.
	// +optional
	// +listType=atomic
	Tracks []TrackStatus `json:"tracks,omitempty"`

	// Approved lists the stages approved for this revision.
	// +optional
	// +listType=set
	Approved []string `json:"approved,omitempty"`

	// Holding says what keeps further Remotes from moving: a stage baking or
	// awaiting approval, a pause.
	// +optional
	Holding string `json:"holding,omitempty"`

	// PausedBy names the Remote whose failure paused the rollout.
	// +optional
	PausedBy string `json:"pausedBy,omitempty"`

	// Checked lists the stages whose check (spec.rollout.stages[].check)
	// held for its duration for this revision.
	// +optional
	// +listType=set
	Checked []string `json:"checked,omitempty"`

	// Checks are the last answers to the checks of the stages holding the
	// next ones: one at most per track.
	// +optional
	// +listType=map
	// +listMapKey=stage
	Checks []StageCheckStatus `json:"checks,omitempty"`

	// Moving counts the Remotes moving to this revision now: admitted, or
	// holding it but not available yet. It is what this Module takes of its
	// namespace's and the manager's budget.
	// +optional
	Moving int32 `json:"moving,omitempty"`

	// RolledBack is set once the revision was rolled back.
	// +optional
	RolledBack *Rollback `json:"rolledBack,omitempty"`
}

// TrackStatus is where one track of a rollout is.
type TrackStatus struct {
	// Name of the track; empty for the stages without one.
	Name string `json:"name"`
	// Stage is the track's stage in progress, or holding its next one.
	// +optional
	Stage string `json:"stage,omitempty"`
	// Holding says what keeps the track's further Remotes from moving.
	// +optional
	Holding string `json:"holding,omitempty"`
}

// StageCheckStatus is the last answer to a stage's check.
type StageCheckStatus struct {
	// Stage is the stage whose check this is.
	Stage string `json:"stage"`
	// Started is when the first answer came, for this revision: a check's
	// timeout runs from when its stage was done, or from this when later
	// (a check added to a stage done already). Unset until an answer came.
	// +optional
	Started *metav1.Time `json:"started,omitempty"`
	// CheckedAt is when the last answer came.
	// +optional
	CheckedAt *metav1.Time `json:"checkedAt,omitempty"`
	// Answered is true when the server answered the query; false when it
	// could not be reached or refused it.
	Answered bool `json:"answered"`
	// HoldingSince is when the query started to hold without a break; unset
	// while it does not.
	// +optional
	HoldingSince *metav1.Time `json:"holdingSince,omitempty"`
	// Message is what the server answered, or why it did not.
	// +optional
	Message string `json:"message,omitempty"`
}

// Rollback records a rollback of the current revision.
type Rollback struct {
	// To is the revision the Remotes went back to.
	To string `json:"to"`
	// Version is that revision's git tag, commit, chart version or OCI tag
	// or digest.
	Version string `json:"version"`
	// Remote is the failing Remote that started it; empty for fleetctl
	// rollout undo and for a stage's check that failed.
	// +optional
	Remote string `json:"remote,omitempty"`
	// Message is why: the Remote's own message, or the undo.
	Message string `json:"message"`
	// Time it started.
	Time metav1.Time `json:"time"`
}

// RolloutOutcome is how a revision's rollout ended.
// +kubebuilder:validation:Enum=Succeeded;RolledBack
type RolloutOutcome string

const (
	// RolloutSucceeded: every online selected Remote ran it Ready.
	RolloutSucceeded RolloutOutcome = "Succeeded"
	// RolloutRolledBack: it was rolled back.
	RolloutRolledBack RolloutOutcome = "RolledBack"
)

// RolloutRecord is one version in a Module's history, with what a rollback
// needs to compile it again.
type RolloutRecord struct {
	// Revision is the hash of the sync, its control-plane bindings and its
	// overrides.
	Revision string `json:"revision"`
	// Version is its git tag, commit, chart version or OCI tag or digest.
	Version string `json:"version"`
	// Outcome is Succeeded or RolledBack.
	Outcome RolloutOutcome `json:"outcome"`
	// Time of the outcome.
	Time metav1.Time `json:"time"`
	// Sync is the sync as it was.
	Sync SyncSpec `json:"sync"`
	// ControlPlaneBindings are the bindings as they were.
	// +optional
	ControlPlaneBindings []ControlPlaneBinding `json:"controlPlaneBindings,omitempty"`
	// Overrides are the overrides as they were.
	// +optional
	Overrides []Override `json:"overrides,omitempty"`
}

// ModuleSummary counts a Module's selected Remotes.
type ModuleSummary struct {
	// Total selected Remotes.
	Total int32 `json:"total"`
	// Updated Remotes hold the current version in their ProxyAssemblage.
	Updated int32 `json:"updated"`
	// Ready Remotes report the sync Ready at the current version.
	Ready int32 `json:"ready"`
	// Failed Remotes report the sync Failed.
	Failed int32 `json:"failed"`
	// Blocked Remotes report the sync Blocked on dependencies.
	Blocked int32 `json:"blocked"`
	// Offline Remotes are not Connected.
	Offline int32 `json:"offline"`
	// Suspended Remotes have spec.suspend set: their plan stays as it is.
	// +optional
	Suspended int32 `json:"suspended,omitempty"`
	// PodsNotReady Remotes hold the current version and report its
	// workloads with fewer pods ready than they want; the Ready condition
	// says how many, and why, for the first of them.
	// +optional
	PodsNotReady int32 `json:"podsNotReady,omitempty"`
	// Drifted Remotes report drift in this Module's sync: objects changed
	// in the cluster behind Flux's back, corrected or not.
	// +optional
	Drifted int32 `json:"drifted,omitempty"`
}

// Module is one exactly-versioned Flux sync and the Remotes it runs on.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mod;mods,categories=fleeet
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.summary.ready`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.summary.total`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.spec.rollout.strategy`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Module struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec ModuleSpec `json:"spec,omitempty"`

	// Status is the observed state.
	// +kubebuilder:default={"observedGeneration":-1}
	Status ModuleStatus `json:"status,omitempty"`
}

// ModuleList is a list of Modules.
//
// +kubebuilder:object:root=true
type ModuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Module `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Module{}, &ModuleList{})
}
