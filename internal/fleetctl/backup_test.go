package fleetctl_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleetviewtest"
)

// reportReady plays the cluster of Remote name on c: it reports every sync
// of its plan Ready at the version the plan holds.
func reportReady(ctx context.Context, g Gomega, c *testenv.Cluster, ns, name string) {
	pa := &fleeetv1.ProxyAssemblage{}
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pa)).To(Succeed())
	pa.Status.ObservedGeneration = pa.Generation
	pa.Status.Syncs = nil
	for _, s := range (&fleettest.Contents{Reader: c.Client}).Syncs(pa) {
		pa.Status.Syncs = append(pa.Status.Syncs, fleeetv1.SyncStatus{Name: s.Name, State: fleeetv1.SyncReady, Revision: compile.Version(&s.SyncSpec)})
	}
	g.Expect(c.Client.Status().Update(ctx, pa)).To(Succeed())
}

// plans maps each Remote of ns on c to the version of app its plan holds.
func plans(ctx context.Context, g Gomega, c *testenv.Cluster, ns string) map[string]string {
	pas := &fleeetv1.ProxyAssemblageList{}
	g.Expect(c.Client.List(ctx, pas, client.InNamespace(ns))).To(Succeed())
	held := map[string]string{}
	contents := &fleettest.Contents{Reader: c.Client}
	for i := range pas.Items {
		if s := compile.Find(contents.Syncs(&pas.Items[i]), "app"); s != nil {
			held[pas.Items[i].Name] = compile.Version(&s.SyncSpec)
		}
	}
	return held
}

// A management cluster is lost mid-rollout: a new one gets the Module and
// the token from git, fleetctl restore puts back the pull Remotes, their
// plans and every status while the manager only admits, and the manager
// then continues: the same plans, the approval and the history kept, the
// registrations recognised, and rollout undo returns to the older version.
// The clusters' agents read CompiledPlans, as agents of this version do:
// the backup holds each plan whole, and the new manager, whose Module has
// a new UID and so names new CompiledSyncs and CompiledPlans, writes plans
// that resolve to the same syncs.
func TestBackupAndRestoreRebuildTheManagementCluster(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
	out, err := run(t, ns, "token", "create", "edge", "--free-label-keys", "env", "--max", "5")
	g.Expect(err).NotTo(HaveOccurred(), out)
	remotes := map[string]string{"c-1": "canary", "e-1": "edge", "e-2": "edge"}
	for name, env := range remotes {
		g.Expect(cluster.Client.Create(ctx, &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      map[string]string{"env": env, fleeetv1.RegistrationTokenLabel: "edge"},
			Annotations: map[string]string{"fleeet.dev/recovery-key": "key-of-" + name}}})).To(Succeed())
	}
	// Each cluster's agent connects: it says what it reads and renews the
	// Lease the manager made.
	for name := range remotes {
		r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		g.Expect(cluster.Client.Status().Patch(ctx, r, client.RawPatch(types.MergePatchType,
			[]byte(`{"status":{"readsCompiledSyncs":true,"readsCompiledPlans":true}}`)))).To(Succeed())
		g.Eventually(func(g Gomega) {
			lease := &coordinationv1.Lease{}
			g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, lease)).To(Succeed())
			lease.Spec.RenewTime = &metav1.MicroTime{Time: metav1.Now().Time}
			g.Expect(cluster.Client.Update(ctx, lease)).To(Succeed())
		}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	}
	app := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: fleeetv1.ModuleSpec{
		SyncPlacement: fleeetv1.SyncPlacement{Selector: &metav1.LabelSelector{}, Sync: fleeetv1.SyncSpec{
			Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}},
			Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy", TargetNamespace: ns}},
		}},
		Rollout: fleeetv1.Rollout{Strategy: fleeetv1.RollingUpdateStrategy, Stages: []fleeetv1.RolloutStage{{Name: "canary",
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "canary"}}, Approval: fleeetv1.ManualApproval}}},
	}}
	// A label the tenant added after registration, under no key the token
	// frees.
	g.Eventually(func(g Gomega) {
		r := &fleeetv1.Remote{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e-2"}, r)).To(Succeed())
		g.Expect(r.Finalizers).To(ContainElement(fleeetv1.RemoteIdentityFinalizer), "adopted")
		r.Labels["team"] = "blue"
		g.Expect(cluster.Client.Update(ctx, r)).To(Succeed())
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	g.Expect(cluster.Client.Create(ctx, app)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(plans(ctx, g, cluster, ns)).To(Equal(map[string]string{"c-1": "v1.0.0", "e-1": "v1.0.0", "e-2": "v1.0.0"}))
		for name := range remotes {
			reportReady(ctx, g, cluster, ns, name)
		}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(app), app)).To(Succeed())
		g.Expect(app.Status.History).To(HaveLen(1))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())

	// v1.1.0 reaches the canary, is approved, and moves to one edge Remote.
	g.Expect(testenv.Change(ctx, cluster.Client, app, func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v1.1.0" })).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(plans(ctx, g, cluster, ns)).To(HaveKeyWithValue("c-1", "v1.1.0"))
		reportReady(ctx, g, cluster, ns, "c-1")
		out, err := run(t, ns, "rollout", "approve", "app", "canary")
		g.Expect(err).NotTo(HaveOccurred(), out)
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(plans(ctx, g, cluster, ns)).To(Equal(map[string]string{"c-1": "v1.1.0", "e-1": "v1.1.0", "e-2": "v1.0.0"}))
		g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(app), app)).To(Succeed())
		g.Expect(app.Status.Rollout.Approved).To(Equal([]string{"canary"}))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
	// What each plan holds, resolved: the syncs its cluster runs.
	before := map[string][]fleeetv1.NamedSync{}
	pas := &fleeetv1.ProxyAssemblageList{}
	g.Expect(cluster.Client.List(ctx, pas, client.InNamespace(ns))).To(Succeed())
	contents := &fleettest.Contents{Reader: cluster.Client}
	for i := range pas.Items {
		g.Expect(pas.Items[i].Spec.CompiledPlan).NotTo(BeEmpty(), "plan %s names a CompiledPlan", pas.Items[i].Name)
		before[pas.Items[i].Name] = contents.Syncs(&pas.Items[i])
	}
	token := &fleeetv1.RegistrationToken{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, token)).To(Succeed())
	g.Expect(token.Status.Registered).To(HaveLen(3))

	file := filepath.Join(t.TempDir(), "backup.yaml")
	out, err = run(t, ns, "backup", "-o", file)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("backup " + file + ": 1 Modules, 1 RegistrationTokens, 3 Remotes, 3 ProxyAssemblages\n"))
	raw, err := os.ReadFile(file)
	g.Expect(err).NotTo(HaveOccurred())
	secrets := &corev1.SecretList{}
	g.Expect(cluster.Client.List(ctx, secrets, client.InNamespace(ns))).To(Succeed())
	g.Expect(secrets.Items).NotTo(BeEmpty())
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			g.Expect(string(raw)).NotTo(ContainSubstring(string(v)), "Secret %s key %s is in the backup", s.Name, k)
		}
	}

	// The new management cluster: the manager admits only, git brings the
	// Module and the token, and restore brings the rest.
	fresh := testenv.StartCluster(t, "rebuilt", testenv.WithWebhooks())
	for _, n := range []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "fleeet-system"}},
		{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{fleeetv1.TenantLabel: "true"}}}} {
		g.Expect(fresh.Client.Create(ctx, n)).To(Succeed())
	}
	admitting := fleetviewtest.ManagerOptions(fresh)
	admitting.AdmissionOnly = true
	stop, err := fleetviewtest.StartManager(fresh, admitting)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fresh.Client.Create(ctx, &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}, Spec: token.Spec})).To(Succeed())
	g.Expect(fresh.Client.Create(ctx, &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: app.Spec})).To(Succeed())
	asManager := managerIdentity(ctx, g, fresh)

	notBackup := filepath.Join(t.TempDir(), "list.yaml")
	g.Expect(os.WriteFile(notBackup, []byte("apiVersion: v1\nkind: List\n"), 0o600)).To(Succeed())
	_, err = runOn(t, fresh, ns, "restore", "-f", notBackup)
	g.Expect(err).To(MatchError(notBackup + `: apiVersion "v1", kind "List": want fleeet.dev/v1alpha1 Backup, as fleetctl backup writes`))
	_, err = runOn(t, fresh, ns, "restore", "-f", file)
	g.Expect(err).To(MatchError(ContainSubstring("keys under fleeet.dev/ are set only by the fleet manager")), "admission refuses anyone else")
	out, err = runOn(t, fresh, ns, append([]string{"restore", "-f", file}, asManager...)...)
	g.Expect(err).NotTo(HaveOccurred(), out)
	for _, line := range []string{"Remote " + ns + "/c-1: created, status restored", "ProxyAssemblage " + ns + "/e-2: created, status restored",
		"RegistrationToken " + ns + "/edge: status restored: 3 registrations",
		"Module " + ns + "/app: status restored: 1 versions of history, rollout of revision " + compile.ModuleRevision(app) + ` at stage "", approved [canary]`} {
		g.Expect(out).To(ContainSubstring(line + "\n"))
	}
	again, err := runOn(t, fresh, ns, append([]string{"restore", "-f", file}, asManager...)...)
	g.Expect(err).NotTo(HaveOccurred(), again)
	g.Expect(again).To(ContainSubstring("Remote "+ns+"/c-1: exists; status restored\n"), "the same status again")
	g.Expect(again).To(ContainSubstring("ProxyAssemblage " + ns + "/c-1: exists; kept as it is\n"))
	stop(t.Failed())

	// Every plan the new manager writes, until the undo, resolves to what
	// its Remote had.
	freshContents := &fleettest.Contents{Reader: fresh.Client}
	wc, err := client.NewWithWatch(fresh.Config, client.Options{Scheme: testenv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(ctx, &fleeetv1.ProxyAssemblageList{}, client.InNamespace(ns))
	g.Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	var strays []string
	var watched sync.WaitGroup
	watched.Go(func() {
		for ev := range w.ResultChan() {
			if pa, ok := ev.Object.(*fleeetv1.ProxyAssemblage); ok && ev.Type != watch.Error &&
				!equality.Semantic.DeepEqual(freshContents.Syncs(pa), before[pa.Name]) {
				mu.Lock()
				strays = append(strays, pa.Name)
				mu.Unlock()
			}
		}
	})
	stopManager, err := fleetviewtest.StartManager(fresh, fleetviewtest.ManagerOptions(fresh))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { stopManager(t.Failed()) })

	restored := &fleeetv1.Module{}
	g.Eventually(func(g Gomega) {
		g.Expect(fresh.Client.Get(ctx, client.ObjectKeyFromObject(app), restored)).To(Succeed())
		g.Expect(restored.Status.ObservedGeneration).To(Equal(restored.Generation))
		g.Expect(restored.Status.Rollout.Revision).To(Equal(app.Status.Rollout.Revision))
		g.Expect(restored.Status.Rollout.Approved).To(Equal([]string{"canary"}))
		g.Expect(restored.Status.History).To(Equal(app.Status.History))
		pas := &fleeetv1.ProxyAssemblageList{}
		g.Expect(fresh.Client.List(ctx, pas, client.InNamespace(ns))).To(Succeed())
		g.Expect(pas.Items).To(HaveLen(3))
		for i := range pas.Items {
			pa := &pas.Items[i]
			g.Expect(pa.Spec.CompiledPlan).NotTo(BeEmpty(), "the new manager writes plan %s naming a CompiledPlan again", pa.Name)
			stamps, err := plancontent.Stamps(ctx, pa, plancontent.From(fresh.Client, ns))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(stamps).To(HaveKeyWithValue("app", HaveField("Generation", restored.Generation)), "compiled by the new manager")
			g.Expect(freshContents.Syncs(pa)).To(Equal(before[pa.Name]))
		}
		tok := &fleeetv1.RegistrationToken{}
		g.Expect(fresh.Client.Get(ctx, client.ObjectKeyFromObject(token), tok)).To(Succeed())
		for name := range remotes {
			r := &fleeetv1.Remote{}
			g.Expect(fresh.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, r)).To(Succeed())
			g.Expect(r.Annotations).To(HaveKeyWithValue("fleeet.dev/recovery-key", "key-of-"+name))
			g.Expect(r.Labels).To(HaveKeyWithValue("env", remotes[name]))
			if name == "e-2" {
				g.Expect(r.Labels).To(HaveKeyWithValue("team", "blue"))
			}
			g.Expect(tok.Status.Registered).To(ContainElement(And(HaveField("Name", name), HaveField("UID", r.UID))))
			g.Expect(r.Status.Conditions).To(ContainElement(And(HaveField("Type", fleeetv1.RegisteredCondition),
				HaveField("Reason", fleeetv1.ReasonRegistered))), "the manager keeps the restored Remote, and its Lease")
		}
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())

	out, err = runOn(t, fresh, ns, "rollout", "undo", "app")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("module/app: rolling v1.1.0 back to v1.0.0\n"))
	w.Stop()
	watched.Wait()
	g.Expect(strays).To(BeEmpty(), "the new manager wrote plans its Remotes never had")
	g.Eventually(func(g Gomega) map[string]string { return plans(ctx, g, fresh, ns) }, fleetviewtest.Timeout, fleetviewtest.Poll).
		Should(Equal(map[string]string{"c-1": "v1.0.0", "e-1": "v1.0.0", "e-2": "v1.0.0"}))
}

// managerIdentity is the --as and --as-group flags that make fleetctl act
// as the fleet-manager of c, as restore must.
func managerIdentity(ctx context.Context, g Gomega, c *testenv.Cluster) []string {
	review := &authenticationv1.SelfSubjectReview{}
	g.Expect(c.Client.Create(ctx, review)).To(Succeed())
	flags := []string{"--as", review.Status.UserInfo.Username}
	for _, group := range review.Status.UserInfo.Groups {
		flags = append(flags, "--as-group", group)
	}
	return flags
}

// A Remote whose plan is split over parts gets every part back: restore
// creates each one, part 0 and the further part alike, owned by the Remote
// as the compiler's are, with the spec that makes the plan whole (the
// revision part 0 lists, the revision the part carries) and what the
// cluster last reported on it, so the grid reads as before the loss.
func TestRestoreBringsBackEveryPartOfASplitPlan(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := fleetviewtest.SplitFleet(t, cluster)
	parts := func(g Gomega) map[string]fleeetv1.ProxyAssemblage {
		list := &fleeetv1.ProxyAssemblageList{}
		g.Expect(cluster.Client.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		byName := map[string]fleeetv1.ProxyAssemblage{}
		for _, pa := range list.Items {
			byName[pa.Name] = pa
		}
		return byName
	}
	before := parts(g)
	g.Expect(before).To(HaveKey("big"))
	g.Expect(before).To(HaveKeyWithValue("big.p1", HaveField("Spec.Assemblage.PartRevision", before["big"].Spec.Assemblage.Parts[0])))

	file := filepath.Join(t.TempDir(), "backup.yaml")
	out, err := run(t, ns, "backup", "-o", file)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("backup " + file + ": 2 Modules, 0 RegistrationTokens, 1 Remotes, 2 ProxyAssemblages\n"))

	// The plan is lost. big is suspended: the compiler does not write it
	// again.
	for name := range before {
		g.Expect(cluster.Client.Delete(ctx, &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	}
	g.Eventually(parts, fleetviewtest.Timeout, fleetviewtest.Poll).Should(BeEmpty())

	out, err = run(t, ns, append([]string{"restore", "-f", file}, managerIdentity(ctx, g, cluster)...)...)
	g.Expect(err).NotTo(HaveOccurred(), out)
	for name := range before {
		g.Expect(out).To(ContainSubstring("ProxyAssemblage " + ns + "/" + name + ": created, status restored\n"))
	}
	remote := &fleeetv1.Remote{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "big"}, remote)).To(Succeed())
	after := parts(g)
	g.Expect(after).To(HaveLen(len(before)))
	for name, pa := range after {
		g.Expect(metav1.IsControlledBy(&pa, remote)).To(BeTrue(), "%s is owned by its Remote", name)
		g.Expect(pa.Spec).To(Equal(before[name].Spec), name)
		g.Expect(pa.Status.Syncs).To(Equal(before[name].Status.Syncs), name)
		g.Expect(pa.Status.ObservedGeneration).To(Equal(pa.Generation), "%s: the report is about the plan restored", name)
	}
	list := &fleeetv1.ProxyAssemblageList{}
	g.Expect(cluster.Client.List(ctx, list, client.InNamespace(ns))).To(Succeed())
	g.Expect(fleeetv1.GroupProxyPlans(list.Items)["big"].Listed().Syncs()).To(HaveLen(2), "the plan is whole")
	// Eventually: the Remote reads offline until the manager sees its Lease.
	g.Eventually(func(g Gomega) {
		view := statusView(t, g, ns)
		g.Expect(view.Remotes).To(ConsistOf(HaveField("Name", "big")))
		g.Expect(view.Remotes[0].Cells).To(HaveKeyWithValue("crds", HaveField("State", "ready")))
		g.Expect(view.Remotes[0].Cells).To(HaveKeyWithValue("app", HaveField("State", "blocked")))
	}, fleetviewtest.Timeout, fleetviewtest.Poll).Should(Succeed())
}
