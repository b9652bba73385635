package fleetctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// BackupKind and BackupAPIVersion identify a fleetctl backup file, so
// restore refuses any other YAML and a later format can be told apart.
const (
	BackupKind       = "Backup"
	BackupAPIVersion = "fleeet.dev/v1alpha1"
)

// Backup is what a management cluster holds that is not in git and not
// rebuilt by the controllers or the clusters: the status of Modules
// (rollout, approvals, history) and RegistrationTokens (registrations), the
// pull Remotes agents created (whole), the status of every Remote and each
// Remote's plan (ProxyAssemblage) with what its cluster last reported. It
// holds no Secret and no token: Remotes and tokens name their Secrets only.
type Backup struct {
	// APIVersion is BackupAPIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind is BackupKind.
	Kind string `json:"kind"`
	// Time the backup was taken.
	Time metav1.Time `json:"time"`
	// Modules carry their name and status; their spec comes from git.
	Modules []fleeetv1.Module `json:"modules,omitempty"`
	// RegistrationTokens carry their name and status; their spec comes from
	// git.
	RegistrationTokens []fleeetv1.RegistrationToken `json:"registrationTokens,omitempty"`
	// Remotes carry labels, annotations, spec and status: a pull Remote is in
	// no git repository.
	Remotes []fleeetv1.Remote `json:"remotes,omitempty"`
	// ProxyAssemblages are the plans, with the compiler's stamps and what
	// each cluster last reported.
	ProxyAssemblages []fleeetv1.ProxyAssemblage `json:"proxyAssemblages,omitempty"`
}

func newBackupCommand(s *session) *cobra.Command {
	var file string
	var all bool
	cmd := &cobra.Command{
		Use:   "backup -o FILE",
		Short: "Save the fleet state that is in no git repository: rollouts, registrations, pull Remotes, plans",
		Long: `Writes one YAML file (kind Backup) holding what a rebuilt management cluster cannot get from
git: Module and RegistrationToken status, every Remote (pull Remotes whole), and every Remote's plan
with what its cluster last reported. It holds no Secret and no token; back up the Secrets you
created (push Remotes' kubeconfigs, git credentials, delivered Secrets) with your secret store.
Reading the fleet needs list rights on Modules, RegistrationTokens, Remotes and ProxyAssemblages.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := s.client()
			if err != nil {
				return err
			}
			if all {
				ns = ""
			}
			b, err := TakeBackup(cmd.Context(), c, ns)
			if err != nil {
				return err
			}
			raw, err := yaml.Marshal(b)
			if err != nil {
				return err
			}
			if err := os.WriteFile(file, raw, 0o600); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "backup %s: %d Modules, %d RegistrationTokens, %d Remotes, %d ProxyAssemblages\n",
				file, len(b.Modules), len(b.RegistrationTokens), len(b.Remotes), len(b.ProxyAssemblages))
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "output", "o", "", "File to write the backup to (mode 0600)")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "Back up every namespace")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

// TakeBackup reads the state a rebuilt management cluster needs back from
// namespace, or from every namespace when it is empty.
func TakeBackup(ctx context.Context, c client.Client, namespace string) (*Backup, error) {
	b := &Backup{APIVersion: BackupAPIVersion, Kind: BackupKind, Time: metav1.Now()}
	modules, tokens := &fleeetv1.ModuleList{}, &fleeetv1.RegistrationTokenList{}
	remotes, plans := &fleeetv1.RemoteList{}, &fleeetv1.ProxyAssemblageList{}
	for _, list := range []client.ObjectList{modules, tokens, remotes, plans} {
		if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
			return nil, err
		}
	}
	for _, m := range modules.Items {
		b.Modules = append(b.Modules, fleeetv1.Module{ObjectMeta: backupMeta(&m.ObjectMeta, false), Status: m.Status})
	}
	for _, t := range tokens.Items {
		b.RegistrationTokens = append(b.RegistrationTokens, fleeetv1.RegistrationToken{ObjectMeta: backupMeta(&t.ObjectMeta, false), Status: t.Status})
	}
	for _, r := range remotes.Items {
		b.Remotes = append(b.Remotes, fleeetv1.Remote{ObjectMeta: backupMeta(&r.ObjectMeta, true), Spec: r.Spec, Status: r.Status})
	}
	// Plans are kept with every sync whole and their stamps in their own
	// annotation: CompiledSyncs and CompiledPlans are named with keys and
	// hashes the restored Modules do not share, and the compiler stores
	// their content again under the new names.
	contents := map[string]*plancontent.Cache{}
	for _, pa := range plans.Items {
		cache := contents[pa.Namespace]
		if cache == nil {
			cache = &plancontent.Cache{From: plancontent.From(c, pa.Namespace)}
			contents[pa.Namespace] = cache
		}
		if err := wholePlan(ctx, &pa, cache); err != nil {
			return nil, fmt.Errorf("ProxyAssemblage %s/%s: %w", pa.Namespace, pa.Name, err)
		}
		meta := backupMeta(&pa.ObjectMeta, true)
		meta.Generation = pa.Generation // tells whether the report is about this plan
		b.ProxyAssemblages = append(b.ProxyAssemblages, fleeetv1.ProxyAssemblage{ObjectMeta: meta, Spec: pa.Spec, Status: pa.Status})
	}
	return b, nil
}

// backupMeta keeps what identifies an object, and its labels, annotations
// and finalizers when whole: what the new cluster assigns (uid, versions,
// owners) is dropped.
// wholePlan makes the plan part pa hold every sync whole and its stamps in
// its CompiledAnnotation, naming no CompiledSync or CompiledPlan.
func wholePlan(ctx context.Context, pa *fleeetv1.ProxyAssemblage, store plancontent.Store) error {
	stamps, err := plancontent.Stamps(ctx, pa, store)
	if err != nil {
		return err
	}
	resolved, err := plancontent.ResolvePlan(ctx, fleeetv1.ProxyPlan{pa}, store)
	if err != nil {
		return err
	}
	pa.Spec = resolved[0].Spec
	if name := pa.Annotations[fleeetv1.CompiledPlanAnnotation]; name != "" {
		raw, err := json.Marshal(stamps)
		if err != nil {
			return err
		}
		pa.Annotations = maps.Clone(pa.Annotations)
		delete(pa.Annotations, fleeetv1.CompiledPlanAnnotation)
		pa.Annotations[fleeetv1.CompiledAnnotation] = string(raw)
	}
	return nil
}

func backupMeta(m *metav1.ObjectMeta, whole bool) metav1.ObjectMeta {
	kept := metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}
	if whole {
		// A registered Remote keeps the manager's finalizer, the mark of its
		// adoption: without it the manager would adopt it afresh and reset
		// its labels to the token's.
		kept.Labels, kept.Annotations, kept.Finalizers = m.Labels, m.Annotations, m.Finalizers
	}
	return kept
}

func newRestoreCommand(s *session) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "restore -f FILE",
		Short: "Put a backup back on a rebuilt management cluster, while the manager only admits",
		Long: `Run after Modules, push Remotes and RegistrationTokens are applied from git, while the
fleet-manager runs with --admission-only (chart value admissionOnly), as the manager
(--as system:serviceaccount:fleeet-system:fleet-manager): admission lets only it write what
restore writes. Creates the Remotes and plans that are missing, with their labels and
annotations, then writes the status of Modules, RegistrationTokens, Remotes and plans, so the
manager continues each rollout where it was and rollout undo finds the older versions. Objects
that exist keep their spec and metadata (git wins); a status is written only when it holds nothing
the backup lacks, so restoring twice, or over a fleet that moved on, changes nothing.
Impersonating the manager takes a cluster admin.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			b := &Backup{}
			if err := yaml.UnmarshalStrict(raw, b); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if b.APIVersion != BackupAPIVersion || b.Kind != BackupKind {
				return fmt.Errorf("%s: apiVersion %q, kind %q: want %s %s, as fleetctl backup writes", file, b.APIVersion, b.Kind, BackupAPIVersion, BackupKind)
			}
			c, _, err := s.client()
			if err != nil {
				return err
			}
			return Restore(cmd.Context(), c, b, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "Backup file written by fleetctl backup")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// Restore puts b back and writes one line per object saying what it did.
// The order matters: Remotes first (the plans are owned by them, and token
// registrations name their new UIDs), then the statuses.
func Restore(ctx context.Context, c client.Client, b *Backup, out io.Writer) error {
	say := func(kind string, meta *metav1.ObjectMeta, what string) {
		fmt.Fprintf(out, "%s %s/%s: %s\n", kind, meta.Namespace, meta.Name, what)
	}
	for i := range b.Remotes {
		r := &b.Remotes[i]
		live := &fleeetv1.Remote{ObjectMeta: *r.ObjectMeta.DeepCopy(), Spec: r.Spec}
		created, err := createMissing(ctx, c, live)
		if err != nil {
			return fmt.Errorf("remote %s/%s: %w", r.Namespace, r.Name, err)
		}
		if !created && len(live.Status.Conditions) > 0 {
			say("Remote", &r.ObjectMeta, keptAsItIs)
			continue
		}
		// Conditions are the controllers' and the agent's to say afresh.
		live.Status = *r.Status.DeepCopy()
		live.Status.ObservedGeneration, live.Status.Conditions = -1, nil
		if err := c.Status().Update(ctx, live); err != nil {
			return fmt.Errorf("remote %s/%s: writing status: %w", r.Namespace, r.Name, err)
		}
		if err := restoreHeartbeat(ctx, c, live, r.Status.LastHeartbeatTime); err != nil {
			return fmt.Errorf("remote %s/%s: %w", r.Namespace, r.Name, err)
		}
		say("Remote", &r.ObjectMeta, restored(created))
	}
	for i := range b.RegistrationTokens {
		t := &b.RegistrationTokens[i]
		if err := restoreToken(ctx, c, t, say); err != nil {
			return fmt.Errorf("registrationtoken %s/%s: %w", t.Namespace, t.Name, err)
		}
	}
	for i := range b.ProxyAssemblages {
		pa := &b.ProxyAssemblages[i]
		if err := restorePlan(ctx, c, pa, say); err != nil {
			return fmt.Errorf("proxyassemblage %s/%s: %w", pa.Namespace, pa.Name, err)
		}
	}
	for i := range b.Modules {
		m := &b.Modules[i]
		if err := restoreModule(ctx, c, m, say); err != nil {
			return fmt.Errorf("module %s/%s: %w", m.Namespace, m.Name, err)
		}
	}
	return nil
}

// restoreHeartbeat creates a pull Remote's missing Lease, as the manager
// makes it, renewed when the backup last saw the agent's heartbeat: a
// Remote the manager finds without a heartbeat counts as offline, and a
// rollout moves offline Remotes without pacing them. The Remote then stays
// online for the manager's --offline-grace from that heartbeat. A Remote
// the backup saw no heartbeat of gets its Lease unrenewed: its agent
// renews that Lease and cannot create one.
func restoreHeartbeat(ctx context.Context, c client.Client, remote *fleeetv1.Remote, last *metav1.Time) error {
	if remote.Spec.KubeconfigRef != nil {
		return nil
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: remote.Namespace, Name: remote.Name,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(remote, fleeetv1.GroupVersion.WithKind("Remote"))}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(fleeetv1.RemoteIdentityName(remote.Name))}}
	if last != nil {
		lease.Spec.RenewTime = &metav1.MicroTime{Time: last.Time}
	}
	if token, ok := remote.Labels[fleeetv1.RegistrationTokenLabel]; ok {
		lease.Labels = map[string]string{fleeetv1.RegistrationTokenLabel: token}
	}
	if _, err := createMissing(ctx, c, lease); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	return nil
}

// createMissing creates obj unless it exists, and reads it back either way.
func createMissing(ctx context.Context, c client.Client, obj client.Object) (bool, error) {
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if client.IgnoreNotFound(err) != nil || err == nil {
		return false, err
	}
	return true, c.Create(ctx, obj)
}

// keptAsItIs is what restore says of an object it leaves alone.
const keptAsItIs = "exists; kept as it is"

func restored(created bool) string {
	if created {
		return "created, status restored"
	}
	return "exists; status restored"
}

// restoreToken writes a token's registrations, each naming the UID of the
// Remote of that name now: without it the manager would refuse and delete
// every restored pull Remote as registered by nobody.
func restoreToken(ctx context.Context, c client.Client, t *fleeetv1.RegistrationToken, say func(string, *metav1.ObjectMeta, string)) error {
	live := &fleeetv1.RegistrationToken{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(t), live); err != nil {
		return fmt.Errorf("%w (apply it from git first)", err)
	}
	for _, reg := range live.Status.Registered {
		if !slices.ContainsFunc(t.Status.Registered, func(b fleeetv1.Registration) bool { return b.Name == reg.Name }) {
			say("RegistrationToken", &t.ObjectMeta, "status.registered holds "+reg.Name+", which the backup lacks; kept as it is")
			return nil
		}
	}
	registered := make([]fleeetv1.Registration, 0, len(t.Status.Registered))
	for _, reg := range t.Status.Registered {
		remote := &fleeetv1.Remote{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: reg.Name}, remote); err != nil {
			return fmt.Errorf("status.registered[%s]: %w", reg.Name, err)
		}
		reg.UID = remote.UID
		registered = append(registered, reg)
	}
	live.Status.Registered, live.Status.Registrations, live.Status.ObservedGeneration = registered, int32(len(registered)), -1
	if err := c.Status().Update(ctx, live); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	say("RegistrationToken", &t.ObjectMeta, fmt.Sprintf("status restored: %d registrations", len(registered)))
	return nil
}

// restorePlan creates a missing plan, or part of one (fleeetv1.PlanPartName),
// owned by its Remote as the compiler's are, with what its cluster last
// reported. A plan that exists was compiled on this cluster already and is
// kept.
func restorePlan(ctx context.Context, c client.Client, pa *fleeetv1.ProxyAssemblage, say func(string, *metav1.ObjectMeta, string)) error {
	remote := &fleeetv1.Remote{}
	name, _ := fleeetv1.PlanOfPart(pa.Name)
	if err := c.Get(ctx, client.ObjectKey{Namespace: pa.Namespace, Name: name}, remote); err != nil {
		return fmt.Errorf("its Remote: %w", err)
	}
	meta := pa.ObjectMeta.DeepCopy()
	meta.Generation = 0
	meta.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(remote, fleeetv1.GroupVersion.WithKind("Remote"))}
	live := &fleeetv1.ProxyAssemblage{ObjectMeta: *meta, Spec: *pa.Spec.DeepCopy()}
	created, err := createMissing(ctx, c, live)
	if err != nil {
		return err
	}
	if !created {
		say("ProxyAssemblage", &pa.ObjectMeta, keptAsItIs)
		return nil
	}
	live.Status = *pa.Status.DeepCopy()
	// The report was about the plan restored, if about the plan backed up.
	live.Status.ObservedGeneration = -1
	if pa.Status.ObservedGeneration == pa.Generation {
		live.Status.ObservedGeneration = live.Generation
	}
	if err := c.Status().Update(ctx, live); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	say("ProxyAssemblage", &pa.ObjectMeta, restored(created))
	return nil
}

// restoreModule writes a Module's rollout and history, unless its status
// holds a version the backup does not: the manager has moved it on since.
func restoreModule(ctx context.Context, c client.Client, m *fleeetv1.Module, say func(string, *metav1.ObjectMeta, string)) error {
	live := &fleeetv1.Module{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), live); err != nil {
		return fmt.Errorf("%w (apply it from git first)", err)
	}
	for _, h := range live.Status.History {
		if !slices.ContainsFunc(m.Status.History, func(b fleeetv1.RolloutRecord) bool { return b.Revision == h.Revision }) {
			say("Module", &m.ObjectMeta, "status.history holds "+h.Version+", which the backup lacks; kept as it is")
			return nil
		}
	}
	// Conditions and counts are recomputed by the Module controller.
	live.Status.ObservedGeneration = -1
	live.Status.Version = m.Status.Version
	live.Status.Rollout, live.Status.History = m.Status.Rollout.DeepCopy(), m.Status.History
	if err := c.Status().Update(ctx, live); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	say("Module", &m.ObjectMeta, fmt.Sprintf("status restored: %d versions of history%s", len(m.Status.History), rolloutNote(m)))
	return nil
}

// rolloutNote says where the restored rollout stands.
func rolloutNote(m *fleeetv1.Module) string {
	ro := m.Status.Rollout
	if ro == nil {
		return ""
	}
	return fmt.Sprintf(", rollout of revision %s at stage %q, approved %v", ro.Revision, ro.Stage, ro.Approved)
}
