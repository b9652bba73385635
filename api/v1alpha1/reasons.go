package v1alpha1

// Reasons of the conditions and events fleeet's controllers write, one
// vocabulary for every kind: what `kubectl get -o yaml`, `kubectl describe`
// and alerts match on.

// Reasons shared by Modules, BootstrapModules and Assemblages.
const (
	// ReasonSucceeded: every target is at the desired state.
	ReasonSucceeded = "Succeeded"
	// ReasonProgressing: targets are on their way to the desired state.
	ReasonProgressing = "Progressing"
	// ReasonReconcileFailed: a reconcile failed on an error it retries
	// (the API server or a cluster could not be reached); the Warning event
	// with this reason carries the error. Every kind records it.
	ReasonReconcileFailed = "ReconcileFailed"
	// ReasonRemoteFailed: a selected Remote failed on the desired state.
	ReasonRemoteFailed = "RemoteFailed"
	// ReasonBindingFailed: a control-plane binding cannot be resolved for a
	// Remote.
	ReasonBindingFailed = "BindingFailed"
	// ReasonDependencyNotPlaced: a Module a sync depends on by name is not
	// placed on some of the Remotes the sync is (it does not exist, or does
	// not select them); the sync waits there for ever, and the Module names
	// those Remotes.
	ReasonDependencyNotPlaced = "DependencyNotPlaced"
	// ReasonInvalidSelector: the cluster selector does not parse.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonInvalidWindow: a rollout window's schedule or time zone does not
	// parse.
	ReasonInvalidWindow = "InvalidWindow"
	// ReasonInvalidBudget: a namespace's fleeet.dev/max-moving annotation is
	// not a positive integer.
	ReasonInvalidBudget = "InvalidBudget"
	// ReasonWindowNeverOpens: a rollout window's schedule never fires, so
	// it never opens; when none of the windows opens, the rollout holds
	// until the spec changes (windows fail closed).
	ReasonWindowNeverOpens = "WindowNeverOpens"
	// ReasonApprovalIgnored: the fleeet.dev/approve annotation names no
	// stage awaiting approval (another revision, a stage not waiting, or
	// no stage at all); it approves nothing.
	ReasonApprovalIgnored = "ApprovalIgnored"
	// ReasonUndoIgnored: the fleeet.dev/undo annotation names a revision
	// other than the current one; it rolls nothing back.
	ReasonUndoIgnored = "UndoIgnored"
	// ReasonSuspended: spec.suspend stops the Module's rollout.
	ReasonSuspended = "Suspended"
	// ReasonPolicyDenied: admission policy refused a Remote's plan holding
	// the Module's new sync, or the CompiledSync storing it; the Remote
	// keeps what it held of the Module.
	ReasonPolicyDenied = "PolicyDenied"
	// ReasonPlanTooLarge: the Module's sync was left out of Remotes' plans,
	// which would pass the manager's --max-plan-bytes, or hold more than
	// MaxSyncs syncs, with it; the Remotes keep what they held of it and
	// the other Modules' changes go on.
	ReasonPlanTooLarge = "PlanTooLarge"
	// ReasonRolledBack: the Module's revision was rolled back.
	ReasonRolledBack = "RolledBack"

	// ReasonVersionPicked: the manager wrote the version its policy picks
	// into the Module's sync (VersionResolved=True, and an event).
	ReasonVersionPicked = "VersionPicked"
	// ReasonInvalidVersionPolicy: the Module's version policy does not
	// parse, or its source is one the manager does not read.
	ReasonInvalidVersionPolicy = "InvalidVersionPolicy"
	// ReasonSourceUnreadable: the manager could not read the versions the
	// Module's source offers; the sync keeps its version.
	ReasonSourceUnreadable = "SourceUnreadable"
	// ReasonNoVersionInRange: the source offers no version the policy
	// allows that was not rolled back; the sync keeps its version.
	ReasonNoVersionInRange = "NoVersionInRange"
	// ReasonNothingToRollBackTo: a rollback was due, but no earlier version
	// was Ready across the fleet; the rollout pauses instead.
	ReasonNothingToRollBackTo = "NothingToRollBackTo"
	// ReasonRemoteAdmitted: a Remote may move to the new version.
	ReasonRemoteAdmitted = "RemoteAdmitted"
	// ReasonStageStarted: a rollout stage started.
	ReasonStageStarted = "StageStarted"
	// ReasonStageApproved: a stage's manual approval was given.
	ReasonStageApproved = "StageApproved"
	// ReasonStageChecked: a stage's check held for its duration.
	ReasonStageChecked = "StageChecked"
	// ReasonCheckFailed: a stage's check did not hold within its timeout;
	// the rollout pauses (RolloutPaused) or rolls back, as onFailure says.
	ReasonCheckFailed = "CheckFailed"
	// ReasonPausedBySpec: spec.rollout.paused pauses the rollout.
	ReasonPausedBySpec = "PausedBySpec"
	// ReasonPausedByAnnotation: the fleeet.dev/pause annotation (fleetctl
	// rollout pause) pauses the rollout.
	ReasonPausedByAnnotation = "PausedByAnnotation"
)

// Reasons of a Remote's Connected and Ready conditions.
const (
	// ReasonHeartbeatFresh: the pull Remote's agent renewed its Lease within
	// the grace period.
	ReasonHeartbeatFresh = "HeartbeatFresh"
	// ReasonHeartbeatMissed: the agent has not renewed its Lease within the
	// grace period; the Remote is offline.
	ReasonHeartbeatMissed = "HeartbeatMissed"
	// ReasonAwaitingAgent: no agent has renewed the Lease yet.
	ReasonAwaitingAgent = "AwaitingAgent"
	// ReasonPushed: the push Remote's plan is applied to its cluster.
	ReasonPushed = "Pushed"
	// ReasonUnreachable: the other cluster does not answer (push Remote,
	// Upstream).
	ReasonUnreachable = "Unreachable"
	// ReasonKubeconfigInvalid: a push Remote's kubeconfig Secret is missing
	// or holds no usable kubeconfig.
	ReasonKubeconfigInvalid = "KubeconfigInvalid"
	// ReasonKubeconfigRefused: the kubeconfig uses a field that would let
	// the tenant act with the manager's privileges (a file on its disk, a
	// command to run); the message names the field.
	ReasonKubeconfigRefused = "KubeconfigRefused"
	// ReasonServiceAccountNameUnset: a push Remote, Upstream or Assemblage
	// names no spec.serviceAccountName, so Flux would apply the tenant's
	// syncs with its own, unconfined identity; nothing is applied.
	ReasonServiceAccountNameUnset = "ServiceAccountNameUnset"
)

// Reasons of the Registered condition of pull Remotes and Upstreams.
const (
	// ReasonRegistered: the cluster holds a working credential of its own.
	ReasonRegistered = "Registered"
	// ReasonNotRegistered: the Remote carries no registration.
	ReasonNotRegistered = "NotRegistered"
	// ReasonRegistrationPending: the RegistrationToken controller has not
	// recorded the registration yet; on an Upstream, the manager has not
	// issued the first credential of the Remote the agent created yet.
	ReasonRegistrationPending = "RegistrationPending"
	// ReasonRegistrationRefused: the registration is refused (token used up,
	// expired, labels it does not grant…); also the event on the token.
	ReasonRegistrationRefused = "RegistrationRefused"
	// ReasonRegistrationFailed: the agent could not register yet.
	ReasonRegistrationFailed = "RegistrationFailed"
	// ReasonLeaseConflict: the Lease named after the Remote belongs to
	// someone else.
	ReasonLeaseConflict = "LeaseConflict"
	// ReasonLabelsApplied: the Remote carries every label its cluster
	// requests.
	ReasonLabelsApplied = "LabelsApplied"
	// ReasonLabelsRefused: some labels the cluster requests are not the
	// cluster's to choose, or admission refused them; the Remote keeps its
	// labels under those keys.
	ReasonLabelsRefused = "LabelsRefused"
	// ReasonCredentialIssued: the first credential waits for the agent.
	ReasonCredentialIssued = "CredentialIssued"
	// ReasonCredentialNotPickedUp: the agent did not collect its first
	// credential in time.
	ReasonCredentialNotPickedUp = "CredentialNotPickedUp"
	// ReasonRevoked: the cluster's Remote, and with it its identity, is gone.
	ReasonRevoked = "Revoked"
	// ReasonRecovered: a cluster whose credential the management cluster
	// rejected proved it holds the Remote's recovery key and got a new one;
	// also the event on the Remote, naming where the request came from.
	ReasonRecovered = "Recovered"
	// ReasonRecoveryRefused: the recovery endpoint refused the cluster's
	// recovery key; the agent keeps retrying.
	ReasonRecoveryRefused = "RecoveryRefused"
	// ReasonRecoveryFailed: the recovery endpoint could not be asked, or
	// could not answer yet; the agent keeps retrying.
	ReasonRecoveryFailed = "RecoveryFailed"
)

// Reasons of the FluxCompatible condition of Upstreams and Remotes, and of
// the agent's events when it changes.
const (
	// ReasonFluxServed: every kind fleeet writes is served at its version.
	ReasonFluxServed = "FluxServed"
	// ReasonFluxMissing: a CustomResourceDefinition of a kind fleeet writes
	// is not installed.
	ReasonFluxMissing = "FluxMissing"
	// ReasonFluxIncompatible: a CustomResourceDefinition does not serve the
	// API version fleeet writes.
	ReasonFluxIncompatible = "FluxIncompatible"
	// ReasonFluxUnreadable: a CustomResourceDefinition could not be read,
	// so whether Flux is compatible is unknown.
	ReasonFluxUnreadable = "FluxUnreadable"
)

// Reasons of a BootstrapModule's RemotesReachable condition.
const (
	// ReasonPushRemotesOnly: every Remote the BootstrapModule selects is a
	// push Remote.
	ReasonPushRemotesOnly = "PushRemotesOnly"
	// ReasonPullRemotesSelected: the BootstrapModule selects pull Remotes,
	// which the management cluster cannot reach.
	ReasonPullRemotesSelected = "PullRemotesSelected"
)

// Reasons of a pull Remote's AgentCompatible condition, and of the
// manager's Warning event when an agent leaves the skew window.
const (
	// ReasonAgentInWindow: the agent's version is within the skew window.
	ReasonAgentInWindow = "AgentInWindow"
	// ReasonAgentVersionSkew: the agent is newer than the manager, or older
	// than the window allows.
	ReasonAgentVersionSkew = "AgentVersionSkew"
	// ReasonAgentVersionUnknown: the agent has not reported its version, or
	// it or the manager's is not a release and they differ.
	ReasonAgentVersionUnknown = "AgentVersionUnknown"
)

// Reasons of an Upstream's Connected and Ready conditions.
const (
	// ReasonConnected: the management cluster answers.
	ReasonConnected = "Connected"
	// ReasonConnecting: the agent has not reached the management cluster yet.
	ReasonConnecting = "Connecting"
	// ReasonSynced: the plan is mirrored into the local Assemblage.
	ReasonSynced = "Synced"
	// ReasonAwaitingPlan: the management cluster has not compiled a plan yet.
	ReasonAwaitingPlan = "AwaitingPlan"
	// ReasonMirrorFailed: the plan cannot be written locally.
	ReasonMirrorFailed = "MirrorFailed"
	// ReasonPlanIncomplete: the plan is split over several objects and not
	// every part was read at the revision the first lists; what was last
	// mirrored or applied is kept as it is.
	ReasonPlanIncomplete = "PlanIncomplete"
)

// Reasons of a RegistrationToken's conditions and events.
const (
	// ReasonActive: the token admits registrations.
	ReasonActive = "Active"
	// ReasonExpired: the token's ttl has passed.
	ReasonExpired = "Expired"
	// ReasonUsedUp: maxRegistrations Remotes registered with the token.
	ReasonUsedUp = "UsedUp"
	// ReasonManagementURLUnset: the manager was started without
	// --management-url, so no agent values can be written.
	ReasonManagementURLUnset = "ManagementURLUnset"
	// ReasonIdentityFailed: the token's identity cannot be created.
	ReasonIdentityFailed = "IdentityFailed"
	// ReasonRetired: the token's identity is deleted; it admits nothing more.
	ReasonRetired = "Retired"
	// ReasonRegistrationRecorded: a Remote's registration is counted.
	ReasonRegistrationRecorded = "RegistrationRecorded"
)

// Reasons of an Assemblage's conditions and events.
const (
	// ReasonSyncFailed: a sync failed on the cluster.
	ReasonSyncFailed = "SyncFailed"
	// ReasonDependencyCycle: the syncs' dependencies form a cycle.
	ReasonDependencyCycle = "DependencyCycle"
	// ReasonSyncApplied: a sync's Flux objects were applied.
	ReasonSyncApplied = "SyncApplied"
	// ReasonSyncRemoved: a sync's Flux objects were removed.
	ReasonSyncRemoved = "SyncRemoved"
)

// Reasons of the events on policy ConfigMaps.
const (
	// ReasonPolicyLoaded: the ConfigMap's Rego is in force.
	ReasonPolicyLoaded = "PolicyLoaded"
	// ReasonPolicyRejected: the ConfigMap's Rego does not compile; the
	// policies in force stay as they were.
	ReasonPolicyRejected = "PolicyRejected"
)

// Reasons of the conditions and events about delivered Secrets
// (spec.sync.secrets), on Modules, Remotes, Upstreams and Assemblages. Their
// messages name Secrets, never their data.
const (
	// ReasonSecretNotDeliverable: a Secret a sync names is missing or may
	// not be delivered (see the DeliverableLabel); it is left out of every
	// delivery.
	ReasonSecretNotDeliverable = "SecretNotDeliverable"
	// ReasonDeliveryTooLarge: a Remote's delivered Secrets do not fit in
	// one bundle Secret; the bundle keeps what it held.
	ReasonDeliveryTooLarge = "DeliveryTooLarge"
	// ReasonDeliveryConflict: a Secret to deliver downstream exists there
	// and was not delivered by the fleet; it is left as it is.
	ReasonDeliveryConflict = "DeliveryConflict"
	// ReasonDelivered: every Secret the plan names is delivered.
	ReasonDelivered = "Delivered"
)

// ReasonSecretRemoved: a delivered Secret no sync uses any more was deleted
// downstream.
const ReasonSecretRemoved = "SecretRemoved"
