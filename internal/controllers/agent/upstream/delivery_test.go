package upstream_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/remote"
	"github.com/fleeet-dev/fleeet/internal/flux"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// Values of the Secrets the delivery test delivers, or must not; none may
// appear in any plan, status or event.
var deliveryValues = []string{"password-before-rotation", "password-after-rotation", "never-offered", "someone-elses", "kept-downstream"}

// startDelivery runs the manager's delivery controller against the
// management cluster, with the health controller, which records the
// heartbeat a bundle waits for.
func startDelivery(t *testing.T, l *linked) {
	t.Helper()
	stop, err := testenv.StartManager(l.mgmt, "fleet-manager", func(ctx context.Context, mgr ctrl.Manager) error {
		if err := (&remote.HealthReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-manager"), Grace: time.Hour, Concurrent: 1}).SetupWithManager(mgr); err != nil {
			return err
		}
		return (&remote.DeliveryReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-manager"), Concurrent: 1}).SetupWithManager(ctx, mgr)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t.Failed()) })
}

// secret is an Opaque Secret holding password.
func secret(ns, name, password string, labels map[string]string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Data: map[string][]byte{"username": []byte("fleet"), "password": []byte(password)}}
}

var deliverable = map[string]string{fleeetv1.DeliverableLabel: "true"}

// appFiles is a kustomization of one ConfigMap holding version.
func appFiles(version string) map[string]string {
	return map[string]string{
		"deploy/kustomization.yaml": "resources: [configmap.yaml]\n",
		"deploy/configmap.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  version: " + version + "\n",
	}
}

// tenantServiceAccount creates the ServiceAccount Flux applies the plan as,
// allowed everything in the tenant's namespace. (The test apiserver runs no
// controller-manager to fill in the aggregated "admin" ClusterRole.)
func tenantServiceAccount(t *testing.T, l *linked) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(l.down.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: l.tenant, Name: "team"}})).To(Succeed())
	g.Expect(l.down.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: l.tenant, Name: "team"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}})).To(Succeed())
	g.Expect(l.down.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.tenant, Name: "team"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "team"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: l.tenant, Name: "team"}},
	})).To(Succeed())
}

// gitStatus is the HTTP status a private git server answers a clone's
// first request with, sent with password.
func gitStatus(g Gomega, repo, password string) int {
	req, err := http.NewRequest(http.MethodGet, repo+"/info/refs?service=git-upload-pack", nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.SetBasicAuth("fleet", password)
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	return resp.StatusCode
}

// A sync's Secrets reach the cluster from the management cluster through
// the cluster's own bundle: only Secrets labelled deliverable, never over
// a Secret the fleet did not deliver, before the sync is applied, rotated
// in place, and deleted only once the sync using them is gone. Flux
// fetches the sync's private repository with the delivered credential, and
// keeps fetching across its rotation: the sync moves to a new tag once the
// git host refuses the old password. The cluster's identity reads its own
// bundle and nothing else, and none of the values shows in a plan, a
// status, an event or a Flux log.
func TestDeliveredSecretsFollowThePlan(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	l := link(t)
	startDelivery(t, l)
	fluxProcs := testenv.StartFlux(t, l.down, testenv.SourceController, testenv.KustomizeController)
	tenantServiceAccount(t, l)
	git := testenv.NewPrivateGitServer(t, testenv.GitCredentials{Username: "fleet", Password: "password-before-rotation"})
	repo, first := git.Commit(t, "app", appFiles("one"), "v1.0.0")
	mc, dc := l.mgmt.Client, l.down.Client
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))

	g.Expect(mc.Create(ctx, secret(l.ns, "git-creds", "password-before-rotation", deliverable))).To(Succeed())
	g.Expect(mc.Create(ctx, secret(l.ns, "unoffered", "never-offered", nil))).To(Succeed())
	g.Expect(mc.Create(ctx, secret(l.ns, "taken", "someone-elses", deliverable))).To(Succeed())
	g.Expect(dc.Create(ctx, secret(l.tenant, "taken", "kept-downstream", nil))).To(Succeed())

	privateApp := func(tag string) fleeetv1.NamedSync {
		app := appSync(tag)
		app.Source.Git.URL = repo
		app.Source.SecretRef = &fleeetv1.LocalObjectReference{Name: "git-creds"}
		app.Secrets = []fleeetv1.SecretDelivery{{Name: "git-creds"}}
		app.Package.Kustomize.TargetNamespace = l.tenant
		return app
	}
	app := privateApp("v1.0.0")
	other := appSync("v1.0.0")
	other.Name = "other"
	other.Secrets = []fleeetv1.SecretDelivery{{Name: "taken"}, {Name: "unoffered"}}
	setPlan(t, l, app, other)

	asm := &fleeetv1.Assemblage{}
	g.Eventually(func(g Gomega) {
		g.Expect(dc.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: l.up.Name}, asm)).To(Succeed())
		got := &corev1.Secret{}
		g.Expect(dc.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: "git-creds"}, got)).To(Succeed())
		g.Expect(string(got.Data["password"])).To(Equal("password-before-rotation"))
		g.Expect(got.Labels).To(HaveKeyWithValue(fleeetv1.DeliveredLabel, "true"))
		g.Expect(metav1.IsControlledBy(got, asm)).To(BeTrue(), "the delivery goes with its Assemblage")
		ks := &kustomizev1.Kustomization{}
		g.Expect(dc.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: flux.ObjectName(l.up.Name, "app")}, ks)).To(Succeed(), "the sync is applied once its Secret is there")
	}, timeout, poll).Should(Succeed())
	readyAt := func(commit, version string) func(g Gomega) {
		return func(g Gomega) {
			g.Expect(dc.Get(ctx, client.ObjectKeyFromObject(asm), asm)).To(Succeed())
			st := syncStatus(asm, "app")
			g.Expect(st).NotTo(BeNil())
			g.Expect(st.State).To(Equal(fleeetv1.SyncReady), "%+v", st)
			g.Expect(st.Revision).To(ContainSubstring(commit))
			cm := &corev1.ConfigMap{}
			g.Expect(dc.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: "app"}, cm)).To(Succeed())
			g.Expect(cm.Data).To(HaveKeyWithValue("version", version))
		}
	}
	g.Eventually(readyAt(first, "one"), 2*timeout, poll).Should(Succeed(), "Flux fetches with the delivered credential")

	// Not offered: not in the bundle, not downstream. Not delivered by the
	// fleet: left as it is, and the sync naming them waits.
	bundle := &corev1.Secret{}
	g.Expect(mc.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: fleeetv1.DeliveryBundleName(clusterName)}, bundle)).To(Succeed())
	g.Expect(bundle.Data).To(HaveLen(2))
	g.Expect(bundle.Data).To(HaveKey("git-creds"))
	g.Expect(bundle.Data).To(HaveKey("taken"))
	g.Expect(apierrors.IsNotFound(dc.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: "unoffered"}, &corev1.Secret{}))).To(BeTrue())
	g.Eventually(func(g Gomega) {
		c := l.condition(g, fleeetv1.DeliveredCondition)
		g.Expect(c.Reason).To(Equal(fleeetv1.ReasonDeliveryConflict))
		g.Expect(c.Message).To(ContainSubstring("taken"))
		g.Expect(dc.Get(ctx, client.ObjectKeyFromObject(asm), asm)).To(Succeed())
		st := syncStatus(asm, "other")
		g.Expect(st).NotTo(BeNil())
		g.Expect(st.State).To(Equal(fleeetv1.SyncBlocked))
		g.Expect(st.Message).To(Equal("waiting for delivered Secrets: taken, unoffered"))
	}, timeout, poll).Should(Succeed())
	taken := &corev1.Secret{}
	g.Expect(dc.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: "taken"}, taken)).To(Succeed())
	g.Expect(string(taken.Data["password"])).To(Equal("kept-downstream"))

	// Rotation on the git host and the management cluster reaches the
	// cluster, and Flux fetches a new tag with the new password only.
	git.Rotate(testenv.GitCredentials{Username: "fleet", Password: "password-after-rotation"})
	creds := &corev1.Secret{}
	g.Expect(mc.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: "git-creds"}, creds)).To(Succeed())
	creds.Data["password"] = []byte("password-after-rotation")
	g.Expect(mc.Update(ctx, creds)).To(Succeed())
	g.Eventually(func(g Gomega) string {
		got := &corev1.Secret{}
		g.Expect(dc.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: "git-creds"}, got)).To(Succeed())
		return string(got.Data["password"])
	}, timeout, poll).Should(Equal("password-after-rotation"))
	_, second := git.Commit(t, "app", appFiles("two"), "v1.1.0")
	setPlan(t, l, privateApp("v1.1.0"), other)
	g.Eventually(readyAt(second, "two"), 2*timeout, poll).Should(Succeed(), "Flux fetches the new tag with the rotated credential")
	g.Expect(gitStatus(g, repo, "password-before-rotation")).To(Equal(http.StatusUnauthorized), "the old password is refused")
	g.Expect(gitStatus(g, repo, "password-after-rotation")).To(Equal(http.StatusOK))

	// The cluster's identity reads its bundle, and no other Secret.
	cluster := identityClient(t, l)
	g.Expect(cluster.Get(ctx, client.ObjectKeyFromObject(bundle), &corev1.Secret{})).To(Succeed())
	for _, name := range []string{"git-creds", fleeetv1.DeliveryBundleName("edge-2")} {
		err := cluster.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: name}, &corev1.Secret{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "reading Secret %s: %v", name, err)
	}
	g.Expect(apierrors.IsForbidden(cluster.List(ctx, &corev1.SecretList{}, client.InNamespace(l.ns)))).To(BeTrue())

	// The sync goes; its Secret stays while its Kustomization is still
	// being removed, and goes after it.
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Namespace: l.tenant, Name: flux.ObjectName(l.up.Name, "app")}}
	hold := func(add bool) {
		// kustomize-controller writes the object too: retry on a conflict.
		g.Eventually(func() error {
			if err := dc.Get(ctx, client.ObjectKeyFromObject(ks), ks); err != nil {
				return err
			}
			if add {
				controllerutil.AddFinalizer(ks, "test.fleeet.dev/hold")
			} else {
				controllerutil.RemoveFinalizer(ks, "test.fleeet.dev/hold")
			}
			return dc.Update(ctx, ks)
		}, timeout, poll).Should(Succeed())
	}
	hold(true)
	setPlan(t, l, other)
	g.Eventually(func(g Gomega) {
		g.Expect(dc.Get(ctx, client.ObjectKeyFromObject(ks), ks)).To(Succeed())
		g.Expect(ks.DeletionTimestamp).NotTo(BeNil())
	}, timeout, poll).Should(Succeed())
	g.Consistently(func() error {
		return dc.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: "git-creds"}, &corev1.Secret{})
	}, 3*time.Second, poll).Should(Succeed(), "kept while the sync using it is being removed")
	hold(false)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(dc.Get(ctx, client.ObjectKey{Namespace: l.tenant, Name: "git-creds"}, &corev1.Secret{}))
	}, timeout, poll).Should(BeTrue())
	g.Expect(dc.Get(ctx, client.ObjectKeyFromObject(taken), taken)).To(Succeed(), "a Secret the fleet did not deliver is never deleted")

	expectNoDeliveredValues(t, l)
	for fc, p := range fluxProcs {
		logged, err := os.ReadFile(p.LogPath)
		g.Expect(err).NotTo(HaveOccurred())
		for _, v := range deliveryValues {
			g.Expect(string(logged)).NotTo(ContainSubstring(v), "%s's log", fc)
		}
	}

	// Revoked: the cluster's identity reads nothing any more.
	g.Expect(mc.Delete(ctx, l.identity)).To(Succeed())
	g.Eventually(func() bool {
		err := cluster.Get(ctx, client.ObjectKeyFromObject(bundle), &corev1.Secret{})
		return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)
	}, timeout, poll).Should(BeTrue())
}

// setPlan replaces the syncs of the cluster's plan.
func setPlan(t *testing.T, l *linked, syncs ...fleeetv1.NamedSync) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func() error {
		if err := l.mgmt.Client.Get(t.Context(), client.ObjectKeyFromObject(l.plan), l.plan); err != nil {
			return err
		}
		l.plan.Spec.Assemblage.Syncs = syncs
		return l.mgmt.Client.Update(t.Context(), l.plan)
	}, timeout, poll).Should(Succeed())
}

func syncStatus(asm *fleeetv1.Assemblage, name string) *fleeetv1.SyncStatus {
	for i := range asm.Status.Syncs {
		if asm.Status.Syncs[i].Name == name {
			return &asm.Status.Syncs[i]
		}
	}
	return nil
}

// identityClient is a client of the management cluster authenticated as
// the cluster's identity.
func identityClient(t *testing.T, l *linked) client.Client {
	t.Helper()
	cfg := rest.AnonymousClientConfig(l.mgmt.Config)
	cfg.BearerToken = testenv.ServiceAccountToken(t, l.mgmt, l.ns, l.identity.Name)
	c, err := client.New(cfg, client.Options{Scheme: l.mgmt.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// expectNoDeliveredValues fails if any delivered value shows in the plan,
// the Remote, the Upstream, the Assemblage or an event of either cluster.
func expectNoDeliveredValues(t *testing.T, l *linked) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	var objs []any
	for _, c := range []struct {
		cl   client.Client
		list client.ObjectList
	}{
		{l.mgmt.Client, &fleeetv1.ProxyAssemblageList{}}, {l.mgmt.Client, &fleeetv1.RemoteList{}}, {l.mgmt.Client, &fleeetv1.ModuleList{}},
		{l.mgmt.Client, &eventsv1.EventList{}}, {l.mgmt.Client, &corev1.EventList{}},
		{l.down.Client, &fleeetv1.AssemblageList{}}, {l.down.Client, &fleeetv1.UpstreamList{}},
		{l.down.Client, &eventsv1.EventList{}}, {l.down.Client, &corev1.EventList{}},
	} {
		g.Expect(c.cl.List(ctx, c.list)).To(Succeed())
		objs = append(objs, c.list)
	}
	raw, err := json.Marshal(objs)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(raw)).To(ContainSubstring("git-creds"), "the scan reads what names the Secrets")
	for _, v := range deliveryValues {
		g.Expect(string(raw)).NotTo(ContainSubstring(v))
	}
}
