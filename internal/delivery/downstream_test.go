package delivery_test

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/delivery"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// cluster is the downstream apiserver the tests of the package share, one
// namespace per test.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "downstream", &cluster, nil))
}

// The rights on Secrets and Assemblages in a tenant namespace of the agent
// chart's identities that deliver: this chart's (no read of a Secret), and
// the push identity's of the chart before it (no patch).
var (
	delivers = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "patch", "delete"}},
		{APIGroups: []string{fleeetv1.GroupVersion.Group}, Resources: []string{"assemblages"}, Verbs: []string{"patch"}},
	}
	pushedBefore = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "update", "delete"}},
		{APIGroups: []string{fleeetv1.GroupVersion.Group}, Resources: []string{"assemblages"}, Verbs: []string{"get", "create", "update", "delete"}},
	}
)

// deliverer is a client in ns holding rules there, counting the writes it
// sends.
func deliverer(t *testing.T, ns string, rules []rbacv1.PolicyRule, writes *atomic.Int32) client.Client {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deliverer"}, Rules: rules}
	g.Expect(cluster.Client.Create(ctx, role)).To(Succeed())
	g.Expect(cluster.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deliverer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "deliverer"}}})).To(Succeed())
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "deliverer", Groups: []string{"system:authenticated"}}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: cluster.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	count := func() { writes.Add(1) }
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count()
			return c.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			count()
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			count()
			return c.Delete(ctx, obj, opts...)
		},
	})
}

// scene is a tenant namespace holding an Assemblage and the tenant's own
// Secret theirs, and a deliverer there holding rules.
type scene struct {
	ns     string
	as     client.Client
	writes atomic.Int32
	asm    *fleeetv1.Assemblage
}

func newScene(t *testing.T, rules []rbacv1.PolicyRule) *scene {
	t.Helper()
	g := NewWithT(t)
	sc := &scene{ns: cluster.Namespace(t, "tenant", nil)}
	sc.as = deliverer(t, sc.ns, rules, &sc.writes)
	sc.asm = &fleeetv1.Assemblage{ObjectMeta: metav1.ObjectMeta{Namespace: sc.ns, Name: sc.ns}}
	g.Expect(cluster.Client.Create(t.Context(), sc.asm)).To(Succeed())
	g.Expect(cluster.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sc.ns, Name: "theirs"},
		Data: map[string][]byte{"password": []byte("tenants-own")}})).To(Succeed())
	return sc
}

// An identity that may not read a single Secret of the namespace delivers
// Secrets there: it creates them, rotates them in place, replaces one whose
// type changed, puts back one changed behind its back once its memory is
// stale, and sends nothing for a delivery it already made. A tenant's own
// Secret of the same name is reported, never changed; a change the
// apiserver refuses deletes nothing; what was delivered is recorded on the
// Assemblage, and only that is deleted once unused.
func TestSecretsAreDeliveredWithoutReadingAny(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	sc := newScene(t, delivers)
	ns, as, asm, writes, admin := sc.ns, sc.as, sc.asm, &sc.writes, cluster.Client
	g.Expect(apierrors.IsForbidden(as.Get(ctx, client.ObjectKey{Namespace: ns, Name: "theirs"}, &corev1.Secret{}))).To(BeTrue(), "the deliverer reads no Secret")

	now := time.Now()
	w := &delivery.Writer{Now: func() time.Time { return now }}
	opaque := func(password string) delivery.Item {
		return delivery.Item{Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte(password)}}
	}
	read := func(name string) *corev1.Secret {
		s := &corev1.Secret{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		return s
	}
	deliver := func(items map[string]delivery.Item) []string {
		conflicts, err := w.Write(ctx, as, asm, items)
		g.Expect(err).NotTo(HaveOccurred())
		return conflicts
	}

	// Created; the tenant's own Secret is reported and left as it is.
	g.Expect(deliver(map[string]delivery.Item{"creds": opaque("one"), "theirs": opaque("fleet")})).To(Equal([]string{"theirs"}))
	creds := read("creds")
	g.Expect(creds.Labels).To(HaveKeyWithValue(fleeetv1.DeliveredLabel, "true"))
	g.Expect(metav1.IsControlledBy(creds, asm)).To(BeTrue())
	g.Expect(creds.Data).To(HaveKeyWithValue("password", []byte("one")))
	g.Expect(read("theirs").Data).To(HaveKeyWithValue("password", []byte("tenants-own")))
	g.Expect(read("theirs").Labels).NotTo(HaveKey(fleeetv1.DeliveredLabel))
	stored := &fleeetv1.Assemblage{}
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(asm), stored)).To(Succeed())
	g.Expect(delivery.LedgerOf(stored)).To(Equal(delivery.Ledger{"creds": creds.UID}), "the ledger names what was delivered, not the tenant's")
	g.Expect(stored.ResourceVersion).To(Equal(asm.ResourceVersion), "the writer keeps the Assemblage it wrote")

	// Rotated in place.
	deliver(map[string]delivery.Item{"creds": opaque("two")})
	g.Expect(read("creds").Data).To(HaveKeyWithValue("password", []byte("two")))
	g.Expect(read("creds").UID).To(Equal(creds.UID))

	// Delivered already: nothing is sent, until the memory is stale; then
	// a change made behind the writer's back is put back.
	writes.Store(0)
	deliver(map[string]delivery.Item{"creds": opaque("two")})
	g.Expect(writes.Load()).To(BeZero())
	tampered := read("creds")
	tampered.Data["password"] = []byte("tampered")
	g.Expect(admin.Update(ctx, tampered)).To(Succeed())
	now = now.Add(11 * time.Minute)
	deliver(map[string]delivery.Item{"creds": opaque("two")})
	g.Expect(writes.Load()).To(Equal(int32(1)), "one patch: the ledger says it was delivered")
	g.Expect(read("creds").Data).To(HaveKeyWithValue("password", []byte("two")))
	// Delivered, then deleted behind the writer's back: the patch finds
	// nothing, and it is created again.
	g.Expect(admin.Delete(ctx, read("creds"))).To(Succeed())
	now = now.Add(11 * time.Minute)
	writes.Store(0)
	deliver(map[string]delivery.Item{"creds": opaque("two")})
	g.Expect(writes.Load()).To(Equal(int32(3)), "the patch that finds nothing, the create, and the ledger's new UID")
	creds = read("creds")
	g.Expect(creds.Data).To(HaveKeyWithValue("password", []byte("two")))
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(asm), stored)).To(Succeed())
	g.Expect(delivery.LedgerOf(stored)).To(Equal(delivery.Ledger{"creds": creds.UID}), "the ledger names the Secret created again")

	// A change the apiserver refuses (someone made the Secret immutable)
	// deletes nothing.
	g.Expect(admin.Patch(ctx, read("creds"), client.RawPatch(types.MergePatchType, []byte(`{"immutable":true}`)))).To(Succeed())
	_, err := w.Write(ctx, as, asm, map[string]delivery.Item{"creds": opaque("rotated-" + strings.Repeat("x", 8))})
	g.Expect(err).To(MatchError(ContainSubstring("delivering Secret " + ns + "/creds")))
	g.Expect(err.Error()).NotTo(ContainSubstring("xxxxxxxx"), "errors carry no data")
	g.Expect(read("creds").UID).To(Equal(creds.UID))
	g.Expect(read("creds").Data).To(HaveKeyWithValue("password", []byte("two")))

	// A new type replaces it.
	basic := delivery.Item{Type: corev1.SecretTypeBasicAuth, Data: map[string][]byte{"username": []byte("fleet"), "password": []byte("three")}}
	deliver(map[string]delivery.Item{"creds": basic})
	replaced := read("creds")
	g.Expect(replaced.Type).To(Equal(corev1.SecretTypeBasicAuth))
	g.Expect(replaced.UID).NotTo(Equal(creds.UID))
	g.Expect(delivery.LedgerOf(asm)).To(Equal(delivery.Ledger{"creds": replaced.UID}))

	// Pruned: only what the ledger holds, and only as delivered. A Secret
	// the tenant put in the place of a delivered one stays.
	deliver(map[string]delivery.Item{"creds": basic, "swapped": opaque("four")})
	g.Expect(admin.Delete(ctx, read("swapped"))).To(Succeed())
	g.Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swapped"}})).To(Succeed())
	pruned, err := delivery.Prune(ctx, as, asm, map[string]bool{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pruned).To(Equal([]string{"creds"}))
	g.Expect(apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "creds"}, &corev1.Secret{}))).To(BeTrue())
	read("swapped")
	read("theirs")
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(asm), stored)).To(Succeed())
	g.Expect(stored.Annotations).NotTo(HaveKey(fleeetv1.DeliveredSecretsAnnotation))
}

// The manager upgraded first pushes into a cluster whose fleet-agent chart
// is a version behind: its push identity may read and update Secrets and
// Assemblages but not patch them. Deliveries still arrive, rotate and are
// recorded, and the tenant's own Secret is still left alone.
func TestAPushIdentityOfTheChartBeforeStillDelivers(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	sc := newScene(t, pushedBefore)
	ns, as, asm, admin := sc.ns, sc.as, sc.asm, cluster.Client
	w := &delivery.Writer{}
	for _, password := range []string{"one", "two"} {
		conflicts, err := w.Write(ctx, as, asm, map[string]delivery.Item{
			"creds":  {Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte(password)}},
			"theirs": {Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("fleet")}},
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(conflicts).To(Equal([]string{"theirs"}))
		creds := &corev1.Secret{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "creds"}, creds)).To(Succeed())
		g.Expect(creds.Data).To(HaveKeyWithValue("password", []byte(password)))
		stored := &fleeetv1.Assemblage{}
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(asm), stored)).To(Succeed())
		g.Expect(delivery.LedgerOf(stored)).To(Equal(delivery.Ledger{"creds": creds.UID}))
	}
	theirs := &corev1.Secret{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "theirs"}, theirs)).To(Succeed())
	g.Expect(theirs.Data).To(HaveKeyWithValue("password", []byte("tenants-own")))
}
