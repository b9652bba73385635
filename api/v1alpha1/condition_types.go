package v1alpha1

import "strings"

// Condition types. Every kind carries the kstatus trio Ready, Reconciling and
// Stalled, so `kubectl wait --for=condition=Ready` and kstatus-aware tools
// (Flux, Argo CD, cli-utils) read every fleeet object the same way.
const (
	// ReadyCondition is True when the object's desired state has been reached.
	ReadyCondition = "Ready"

	// ReconcilingCondition is True while a controller is working towards the
	// desired state.
	ReconcilingCondition = "Reconciling"

	// StalledCondition is True when the controller cannot make progress until
	// the spec changes.
	StalledCondition = "Stalled"

	// VersionResolvedCondition is True on a Module with a version policy
	// while the manager can read its source's versions and the sync holds
	// the one the policy picks; False says why not (the source unreadable,
	// no version satisfying the policy, the write refused). It never changes
	// what the Remotes run.
	VersionResolvedCondition = "VersionResolved"

	// ConnectedCondition is True on a Remote while its cluster is reachable
	// (push) or its agent's heartbeat is fresh (pull), and on an Upstream while
	// the management cluster answers.
	ConnectedCondition = "Connected"

	// RegisteredCondition is True on an Upstream once its cluster holds a
	// working per-cluster credential, and on a pull Remote once the manager
	// has issued that credential.
	RegisteredCondition = "Registered"

	// FluxCompatibleCondition is True on an Upstream, and on its Remote,
	// while the cluster's Flux serves every kind at the API version fleeet
	// writes; False names the CustomResourceDefinition that is missing or
	// serves other versions. It never stops the plan from being mirrored.
	FluxCompatibleCondition = "FluxCompatible"

	// AgentCompatibleCondition is True on a pull Remote while its agent's
	// version is within the skew window of the manager's (internal/version),
	// False outside it, Unknown while either is not a comparable release. It
	// never stops the plan from being delivered.
	AgentCompatibleCondition = "AgentCompatible"

	// RemotesReachableCondition is False on a BootstrapModule that selects
	// pull Remotes, which it cannot reach from the management cluster and
	// so does not apply to; the message names the first few.
	RemotesReachableCondition = "RemotesReachable"

	// RolloutPausedCondition is True on a Module whose rollout stopped because
	// a Remote failed on the new version, or because a person paused it
	// (reason PausedBySpec or PausedByAnnotation, which no alert reads).
	RolloutPausedCondition = "RolloutPaused"

	// RolledBackCondition is True on a Module whose current revision was
	// rolled back, automatically or by fleetctl rollout undo; it holds until
	// the sync's spec changes.
	RolledBackCondition = "RolledBack"

	// DeliveredCondition on an Upstream says whether every Secret its plan
	// delivers is written in the tenant's namespace downstream.
	DeliveredCondition = "Delivered"

	// LabelsAppliedCondition on a registered Remote, and on its Upstream,
	// says whether the labels the cluster requests (Remote
	// status.requestedLabels, from the Upstream's spec.labels) are on the
	// Remote; False names each refused key and why.
	LabelsAppliedCondition = "LabelsApplied"
)

// ReservedKey reports whether a label or annotation key is fleeet's own:
// its prefix is fleeet.dev or a subdomain of it, as package reserved of the
// admission policies judges it.
func ReservedKey(k string) bool {
	prefix, _, found := strings.Cut(k, "/")
	return found && (prefix == "fleeet.dev" || strings.HasSuffix(prefix, ".fleeet.dev"))
}

// Labels and annotations under fleeet.dev/ are reserved for fleeet's own
// controllers; admission policy refuses them from tenants and registrants.
const (
	// TenantLabel marks a management namespace as a tenant.
	TenantLabel = "fleeet.dev/tenant"

	// PolicyLabel marks a ConfigMap in the manager's namespace as holding Rego.
	PolicyLabel = "fleeet.dev/policy"

	// AssemblageLabel names the Assemblage a Flux object was expanded from.
	AssemblageLabel = "fleeet.dev/assemblage"

	// SyncLabel names the sync a Flux object was expanded from.
	SyncLabel = "fleeet.dev/sync"

	// BootstrapModuleLabel names the BootstrapModule a Flux object in the
	// management cluster was expanded from.
	BootstrapModuleLabel = "fleeet.dev/bootstrap-module"

	// RemoteLabel names the Remote a BootstrapModule's Flux object applies to.
	RemoteLabel = "fleeet.dev/remote"

	// InventoryLabel names, on a Remote the manager enrolled from an
	// inventory, the kind of inventory object it follows (ClusterAPI or
	// ClusterProfile); the object has the Remote's name.
	InventoryLabel = "fleeet.dev/inventory"

	// ClusterProfileLabel on a Secret of a tenant namespace names the
	// ClusterProfile whose token (key token) it holds. The manager reads a
	// profile's token only from the Secret of the profile's name that
	// carries this label with the profile's name as value. Like
	// DeliverableLabel, it is the Secret owner's consent: whoever may write
	// ClusterProfiles but not Secrets cannot have the manager send a token
	// no one offered, fleeet's own least of all, to a server of their
	// choosing.
	ClusterProfileLabel = "fleeet.dev/cluster-profile"

	// ServiceAccountAnnotation on a Cluster API Cluster or a ClusterProfile
	// names the downstream ServiceAccount its Remote's
	// spec.serviceAccountName is set to.
	ServiceAccountAnnotation = "fleeet.dev/service-account-name"

	// RegistrationTokenLabel names, on the objects the manager creates for
	// registration, the RegistrationToken they serve.
	RegistrationTokenLabel = "fleeet.dev/registration-token"

	// FreeLabelKeysAnnotation on a registered Remote lists, comma-separated,
	// the label keys its cluster may choose values for: its
	// RegistrationToken's freeLabelKeys, less the keys of the token's
	// remoteLabels, recorded by the manager at registration. They govern
	// the cluster's later label requests for the Remote's life, whatever
	// becomes of the token.
	FreeLabelKeysAnnotation = "fleeet.dev/free-label-keys"

	// DeliverableLabel set to "true" on a Secret of a tenant namespace on the
	// management cluster lets Modules of that namespace deliver it
	// (spec.sync.secrets). It is the Secret owner's consent: whoever can
	// label a Secret can write it, so a Module author cannot have the fleet
	// carry a Secret its owner did not offer.
	DeliverableLabel = "fleeet.dev/deliverable"

	// ManagedByLabel set to ManagedByManager marks a Secret of a tenant
	// namespace the fleet manager writes for itself: a RegistrationToken's
	// Secret, a cluster's first credential, a pull Remote's delivery bundle,
	// a kubeconfig composed from a ClusterProfile. The manager's cache holds
	// whole only the Secrets so labelled and those labelled
	// DeliverableLabel=true; it reads any other from the apiserver. The label
	// grants nothing: the manager treats a Secret as its own only when one
	// of its objects controls it, and never delivers one so labelled.
	ManagedByLabel = "fleeet.dev/managed-by"

	// ManagedByManager is the value of ManagedByLabel on the fleet
	// manager's Secrets.
	ManagedByManager = "fleet-manager"

	// DeliveredLabel marks a downstream Secret the fleet delivered; its
	// controller reference names the Assemblage it was delivered for. The
	// fleet overwrites and deletes only Secrets it delivered.
	DeliveredLabel = "fleeet.dev/delivered"

	// DeliveredSecretsAnnotation on a downstream Assemblage (part 0 of a
	// split plan) records, as JSON name → UID, the Secrets the fleet
	// delivered for it: whoever delivers adds to it, and the agent deletes
	// what no sync uses from it, so neither reads a tenant's Secrets.
	DeliveredSecretsAnnotation = "fleeet.dev/delivered-secrets"

	// SecretsAnnotation on a Flux applier lists, comma-separated, the
	// delivered Secrets its sync named when applied; a delivered Secret is
	// kept while any applier still lists it.
	SecretsAnnotation = "fleeet.dev/secrets"

	// UpstreamAnnotation names, as namespace/name, the Upstream a downstream
	// Assemblage is mirrored for.
	UpstreamAnnotation = "fleeet.dev/upstream"

	// SpecHashAnnotation on a Flux object is the hash of the spec the agent
	// last applied, so the agent knows whether the object is at the desired
	// version without comparing defaulted specs.
	SpecHashAnnotation = "fleeet.dev/spec-hash"

	// DependsOnAnnotation on a Flux object lists, comma-separated, the syncs
	// it depended on when applied; removal waits for these dependents first.
	DependsOnAnnotation = "fleeet.dev/depends-on"

	// RetryAnnotation on a Remote is a token (fleetctl retry writes the
	// time) copied into its plan as spec.assemblage.retryRequestedAt: each
	// new value asks Flux on that cluster to try every sync again.
	RetryAnnotation = "fleeet.dev/retry-requested-at"

	// OrphanAnnotation on a downstream Assemblage, set to "true" before it
	// is deleted, has the agent leave what its syncs applied running: it
	// suspends each sync's Kustomization or HelmRelease and then deletes its
	// Flux objects, so Flux's finalizers neither prune nor uninstall. The
	// agent chart's pre-delete hook sets it on the Assemblages of tenant
	// namespaces the release did not create (createNamespaces=false).
	OrphanAnnotation = "fleeet.dev/orphan"

	// ProxyGenerationAnnotation on an Assemblage is the generation of the
	// ProxyAssemblage its spec was copied from, so its status is copied back
	// only when it describes that spec.
	ProxyGenerationAnnotation = "fleeet.dev/proxy-generation"
)

// Finalizers, each held by the controller that cleans up after its object.
const (
	// AssemblageFinalizer holds an Assemblage until its Flux objects are
	// removed in reverse dependency order.
	AssemblageFinalizer = "fleeet.dev/assemblage"

	// BootstrapModuleFinalizer holds a BootstrapModule until its Flux
	// objects are deleted.
	BootstrapModuleFinalizer = "fleeet.dev/bootstrap-module"

	// RegistrationTokenFinalizer holds a RegistrationToken until its
	// identity is deleted.
	RegistrationTokenFinalizer = "fleeet.dev/registration-token"

	// RemoteIdentityFinalizer holds a registered Remote until its cluster
	// identity is deleted.
	RemoteIdentityFinalizer = "fleeet.dev/remote-identity"
)
