package upstream_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/fleetctl"
	"github.com/fleeet-dev/fleeet/internal/recovery"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// recoverable gives a linked cluster a recovery key, names it on the
// Remote as registration does, and runs the fleet manager's recovery
// endpoint against the management cluster. It returns the key.
func (l *linked) recoverable(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	key, err := recovery.NewKey()
	g.Expect(err).NotTo(HaveOccurred())
	remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: clusterName}}
	g.Expect(testenv.Change(ctx, l.mgmt.Client, remote, func(r *fleeetv1.Remote) {
		metav1.SetMetaDataAnnotation(&r.ObjectMeta, fleeetv1.RecoveryKeyAnnotation, recovery.PublicKey(key))
	})).To(Succeed())

	certDir, ca := testenv.ServingCertificate(t)
	addr := testenv.FreeAddr(t)
	l.serveRecovery = func(t *testing.T) func() {
		t.Helper()
		stop, err := testenv.StartManager(l.mgmt, "fleet-manager", func(_ context.Context, mgr ctrl.Manager) error {
			return recovery.Add(mgr, "fleet-manager", recovery.Options{BindAddress: addr, CertDir: certDir})
		})
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		var once sync.Once
		stopOnce := func() { once.Do(func() { stop(t.Failed()) }) }
		l.atEnd(stopOnce)
		return stopOnce
	}
	l.stopRecovery = l.serveRecovery(t)

	// The running agent writes this Secret too (each new token): a patch.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: l.up.Namespace, Name: l.up.Name + "-credential"}}
	g.Expect(testenv.Change(ctx, l.down.Client, secret, func(s *corev1.Secret) {
		s.Data[recovery.PrivateKeyKey] = recovery.EncodePrivate(key)
	})).To(Succeed())
	g.Expect(testenv.Change(ctx, l.down.Client, l.up, func(up *fleeetv1.Upstream) {
		up.Spec.Management.RecoveryURL = "https://" + addr
		up.Spec.Management.RecoveryCABundle = ca
	})).To(Succeed())
	return key
}

// recoveryKey is the cluster's recovery key as stored downstream now.
func (l *linked) recoveryKey(g Gomega) ed25519.PrivateKey {
	secret := &corev1.Secret{}
	g.Expect(l.down.Client.Get(context.Background(), client.ObjectKey{Namespace: l.up.Namespace, Name: l.up.Name + "-credential"}, secret)).To(Succeed())
	key, err := recovery.DecodePrivate(secret.Data[recovery.PrivateKeyKey])
	g.Expect(err).NotTo(HaveOccurred())
	return key
}

// encode is a recovery request as sent.
func encode(g Gomega, req recovery.Request) []byte {
	body, err := json.Marshal(req)
	g.Expect(err).NotTo(HaveOccurred())
	return body
}

// post sends a recovery request as an attacker would, and returns the
// status code and body.
func post(g Gomega, l *linked, body []byte) (int, string) {
	pool := newPool(g, l.up.Spec.Management.RecoveryCABundle)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: pool}}
	resp, err := c.Post(l.up.Spec.Management.RecoveryURL+recovery.Path, "application/json", bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// postAsAnAgent sends a recovery request as post does, and again after
// each 429, as an agent does, and returns the first other status. A copy of
// a request the manager's cache still takes for the one that just rotated
// the key is charged to the Remote's allowance of signed requests (3, then
// one per 10 s), which this test's recoveries have spent; once the cache
// has caught up the endpoint answers for the request itself.
func postAsAnAgent(g Gomega, l *linked, body []byte) int {
	var code int
	g.Eventually(func() int {
		code, _ = post(g, l, body)
		return code
	}, time.Minute, time.Second).ShouldNot(Equal(http.StatusTooManyRequests))
	return code
}

// downstreamState is what must not change downstream across a recovery:
// the UID and generation of the mirrored Assemblage and of every Flux
// object the agent applied from it.
func (l *linked) downstreamState(g Gomega) []string {
	asm := &fleeetv1.Assemblage{}
	g.Expect(l.down.Client.Get(context.Background(), client.ObjectKey{Namespace: l.tenant, Name: l.up.Name}, asm)).To(Succeed())
	state := []string{fmt.Sprintf("Assemblage %s %s/%d", asm.Name, asm.UID, asm.Generation)}
	for _, kind := range []schema.GroupVersionKind{
		{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "KustomizationList"},
		{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepositoryList"},
	} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(kind)
		g.Expect(l.down.Client.List(context.Background(), list, client.InNamespace(l.tenant))).To(Succeed())
		g.Expect(list.Items).NotTo(BeEmpty(), "the agent applied the plan's %s", kind.Kind)
		for _, o := range list.Items {
			state = append(state, fmt.Sprintf("%s %s %s/%d", o.GetKind(), o.GetName(), o.GetUID(), o.GetGeneration()))
		}
	}
	return state
}

// settled waits until the agent has applied the plan downstream and
// returns what is there.
func (l *linked) settled(g Gomega) []string {
	var state []string
	g.Eventually(func(g Gomega) { state = l.downstreamState(g) }, timeout, poll).Should(Succeed())
	return state
}

// A cluster that could recover a refused credential is revoked all the
// same when its Remote is deleted (fleetctl revoke): the manager deletes
// the cluster's identity once the Remote is being deleted, and the refusal
// that follows is the revocation, not an expiry to recover from.
func TestADeletedRemoteIsRevokedWhereRecoveryIsServed(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	l := link(t)
	l.recoverable(t)
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))

	// The manager's finalizer holds a deleted Remote until its identity
	// is gone.
	const finalizer = "test.fleeet.dev/identity"
	remote := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: clusterName}}
	g.Expect(testenv.Change(ctx, l.mgmt.Client, remote, func(r *fleeetv1.Remote) { controllerutil.AddFinalizer(r, finalizer) })).To(Succeed())
	g.Expect(l.mgmt.Client.Delete(ctx, remote)).To(Succeed())
	revoked := func(g Gomega) {
		registered := l.condition(g, fleeetv1.RegisteredCondition)
		g.Expect(registered.Reason).To(Equal(fleeetv1.ReasonRevoked), registered.Message)
		g.Expect(registered.Message).To(ContainSubstring("is being deleted from the management cluster"))
	}
	g.Eventually(revoked, timeout, poll).Should(Succeed())

	g.Expect(l.mgmt.Client.Delete(ctx, l.identity)).To(Succeed())
	g.Expect(testenv.Change(ctx, l.mgmt.Client, remote, func(r *fleeetv1.Remote) { controllerutil.RemoveFinalizer(r, finalizer) })).To(Succeed())
	g.Consistently(revoked, 3*time.Second, poll).Should(Succeed(), "no recovery is asked for")
	g.Consistently(l.mirroredTag, time.Second, poll).Should(Equal("v1.0.0"), "the last plan stays")
}

// TestAClusterReattachesByItself: a cluster whose credential expired while
// it was away, or whose management cluster restarted with a new
// service-account signing key (every token it holds rejected), proves its
// recovery key to the manager's endpoint and is Ready again with no
// command; a management cluster that does not know the Remote yet (rebuilt,
// not restored) is asked again until it does. Meanwhile nothing downstream
// is recreated or changed. Afterwards an old key, an unknown Remote and a
// stale request get the same generic refusal, a request granted once is
// refused when replayed, and each recovery is an event on the Remote.
// Once a thief holds the only key, fleetctl reenrol brings the cluster back
// onto its existing Remote. The steps share one pair of clusters and run
// in order.
func TestAClusterReattachesByItself(t *testing.T) {
	g := NewWithT(t)
	l := link(t)
	first := l.recoverable(t)
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))
	before := l.settled(g)
	// recovered waits until the cluster holds a key other than old and is
	// Ready, with nothing downstream changed; it returns the new key.
	recovered := func(g Gomega, old ed25519.PrivateKey) ed25519.PrivateKey {
		var key ed25519.PrivateKey
		g.Eventually(func(g Gomega) {
			key = l.recoveryKey(g)
			g.Expect(key.Equal(old)).To(BeFalse(), "the key is rotated")
			g.Expect(l.condition(g, fleeetv1.RegisteredCondition).Reason).To(Equal(fleeetv1.ReasonRegistered))
			connected := l.condition(g, fleeetv1.ConnectedCondition)
			g.Expect(connected.Reason).To(Equal(fleeetv1.ReasonConnected), connected.Message)
			g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
			g.Expect(l.up.Status.CredentialExpiresAt.Time).To(BeTemporally(">", time.Now()))
		}, 3*timeout, poll).Should(Succeed())
		g.Expect(l.downstreamState(g)).To(Equal(before), "nothing downstream was recreated or changed")
		return key
	}
	// failedMeanwhile waits until the cluster's recovery fails for reason,
	// saying says, and is retried, with nothing downstream changed.
	failedMeanwhile := func(g Gomega, reason, says string) {
		g.Eventually(func(g Gomega) {
			registered := l.condition(g, fleeetv1.RegisteredCondition)
			g.Expect(registered.Reason).To(Equal(reason))
			g.Expect(registered.Message).To(ContainSubstring("retrying"))
			g.Expect(registered.Message).To(ContainSubstring(says))
			g.Expect(apimeta.IsStatusConditionTrue(l.up.Status.Conditions, fleeetv1.StalledCondition)).To(BeFalse(), "a failed recovery is retried")
		}, timeout, poll).Should(Succeed())
		g.Expect(l.downstreamState(g)).To(Equal(before), "nothing downstream changes meanwhile")
	}
	var afterExpiry, afterRotation ed25519.PrivateKey

	// Token lifetimes are at least ten minutes in the TokenRequest API, so
	// the expiry is simulated by the stored expiresAt alone: the token
	// itself would still be accepted, and the agent asks for recovery only
	// because it believes the token expired.
	t.Run("CredentialExpiredWhileOffline", func(t *testing.T) {
		g := NewWithT(t)
		l.stopAgent()
		secret := &corev1.Secret{}
		g.Expect(l.down.Client.Get(t.Context(), client.ObjectKey{Namespace: l.up.Namespace, Name: l.up.Name + "-credential"}, secret)).To(Succeed())
		secret.Data[credential.ExpiresAtKey] = []byte(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		g.Expect(l.down.Client.Update(t.Context(), secret)).To(Succeed())
		l.stopAgent = l.runAgent(t)
		afterExpiry = recovered(g, first)
	})

	t.Run("SigningKeyRotated", func(t *testing.T) {
		g := NewWithT(t)
		l.mgmt.RotateServiceAccountKey(t)
		afterRotation = recovered(g, afterExpiry)
		remote := &fleeetv1.Remote{}
		g.Expect(l.mgmt.Client.Get(t.Context(), client.ObjectKey{Namespace: l.ns, Name: clusterName}, remote)).To(Succeed())
		g.Expect(remote.Annotations[fleeetv1.RecoveryKeyAnnotation]).To(Equal(recovery.PublicKey(afterRotation)))
		events := &corev1.EventList{}
		g.Expect(l.mgmt.Client.List(t.Context(), events, client.InNamespace(l.ns))).To(Succeed())
		g.Expect(events.Items).To(ContainElement(And(
			HaveField("Reason", fleeetv1.ReasonRecovered),
			HaveField("InvolvedObject.Name", clusterName),
			HaveField("Message", ContainSubstring("127.0.0.1")),
		)), "each recovery is recorded on the Remote, with where it came from")
	})

	// As on a management cluster rebuilt from git whose Remotes are not
	// restored yet: a new signing key, and no Remote.
	t.Run("RemoteNotRestoredYet", func(t *testing.T) {
		g := NewWithT(t)
		ctx := t.Context()
		l.stopAgent()
		remote := &fleeetv1.Remote{}
		g.Expect(l.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: clusterName}, remote)).To(Succeed())
		restored := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: clusterName, Annotations: remote.Annotations}}
		g.Expect(l.mgmt.Client.Delete(ctx, remote)).To(Succeed())
		l.mgmt.RotateServiceAccountKey(t)
		l.stopAgent = l.runAgent(t)
		failedMeanwhile(g, fleeetv1.ReasonRecoveryRefused, "another holder of this cluster's key recovered it")

		// Restored (from git and backup), recovery key included.
		g.Expect(l.mgmt.Client.Create(ctx, restored)).To(Succeed())
		recovered(g, afterRotation)
	})

	t.Run("StolenKeysAndReplaysGainNothing", func(t *testing.T) {
		g := NewWithT(t)
		thief, err := recovery.NewKey()
		g.Expect(err).NotTo(HaveOccurred())
		current := l.recoveryKey(g)
		for name, req := range map[string]recovery.Request{
			"an old key":          recovery.NewRequest(l.ns, clusterName, first, thief, time.Now()),
			"an unknown Remote":   recovery.NewRequest(l.ns, "no-such-cluster", current, thief, time.Now()),
			"a stale request":     recovery.NewRequest(l.ns, clusterName, current, thief, time.Now().Add(-time.Hour)),
			"a key never current": recovery.NewRequest(l.ns, clusterName, thief, thief, time.Now()),
		} {
			code, body := post(g, l, encode(g, req))
			g.Expect(code).To(Equal(http.StatusForbidden), name)
			g.Expect(body).To(Equal("recovery refused\n"), "the same answer for %s: no oracle", name)
		}
		remote := &fleeetv1.Remote{}
		g.Expect(l.mgmt.Client.Get(t.Context(), client.ObjectKey{Namespace: l.ns, Name: clusterName}, remote)).To(Succeed())
		g.Expect(remote.Annotations[fleeetv1.RecoveryKeyAnnotation]).To(Equal(recovery.PublicKey(current)), "no refused request rotated the key")

		// Signed with the current key (as by a thief who copied it), a
		// request is granted; sent again as captured, it is answered once
		// more without a rotation (an agent whose answer was lost resends
		// it), then refused.
		granted := encode(g, recovery.NewRequest(l.ns, clusterName, current, thief, time.Now()))
		code, body := post(g, l, granted)
		g.Expect(code).To(Equal(http.StatusOK))
		g.Expect(body).To(ContainSubstring(`"token":`))
		g.Expect(postAsAnAgent(g, l, granted)).To(Equal(http.StatusOK), "the lost answer is given once more")
		g.Expect(postAsAnAgent(g, l, granted)).To(Equal(http.StatusForbidden), "a further replay is refused")
	})

	// The thief above holds the only key the Remote names: the cluster
	// cannot recover by itself, and its stored credential is gone too.
	t.Run("ReenrolOntoTheExistingRemote", func(t *testing.T) {
		g := NewWithT(t)
		ctx := t.Context()
		l.stopAgent()
		out := l.fleetctl(g, "reenrol", clusterName)
		printed := regexp.MustCompile(recovery.PrivateKeyKey + `=(\S+) `).FindStringSubmatch(out)
		g.Expect(printed).To(HaveLen(2), out)
		given, err := recovery.DecodePrivate([]byte(printed[1]))
		g.Expect(err).NotTo(HaveOccurred())

		// What the printed kubectl command writes downstream.
		secret := &corev1.Secret{}
		g.Expect(l.down.Client.Get(ctx, client.ObjectKey{Namespace: l.up.Namespace, Name: l.up.Name + "-credential"}, secret)).To(Succeed())
		secret.Data = map[string][]byte{
			credential.TokenKey: []byte("expired"), credential.ExpiresAtKey: []byte("1970-01-01T00:00:00Z"),
			recovery.PrivateKeyKey: []byte(printed[1]),
		}
		g.Expect(l.down.Client.Update(ctx, secret)).To(Succeed())
		l.stopAgent = l.runAgent(t)
		key := recovered(g, given)
		remote := &fleeetv1.Remote{}
		g.Expect(l.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: clusterName}, remote)).To(Succeed())
		g.Expect(remote.Annotations[fleeetv1.RecoveryKeyAnnotation]).To(Equal(recovery.PublicKey(key)), "the printed key worked once and is rotated away")
	})

	// docs/operating.md "Disaster recovery" step by step: the management apiserver
	// and etcd replaced by new ones with a new signing key while the agent
	// keeps running. Last, since it empties the management cluster the
	// package shares (later tests make namespaces of their own).
	t.Run("ManagementClusterReplacedAndRestored", func(t *testing.T) {
		g := NewWithT(t)
		ctx := t.Context()
		key := l.recoveryKey(g)
		plan := &fleeetv1.ProxyAssemblage{}
		g.Expect(l.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: clusterName}, plan)).To(Succeed())
		ns := &corev1.Namespace{}
		g.Expect(l.mgmt.Client.Get(ctx, client.ObjectKey{Name: l.ns}, ns)).To(Succeed())
		backup := filepath.Join(t.TempDir(), "fleet.yaml")
		l.fleetctl(g, "backup", "-o", backup)

		l.stopRecovery()
		l.mgmt.Replace(t)
		g.Expect(l.mgmt.Client.Get(ctx, client.ObjectKeyFromObject(plan), &fleeetv1.ProxyAssemblage{})).NotTo(Succeed(), "the new management cluster is empty")
		// 1. This package's management cluster has no admission webhooks,
		// so the manager in admission-only mode would add nothing here;
		// no controller runs until step 4.
		// 2. The tenant namespace from git (this package has no Modules).
		g.Expect(l.mgmt.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: l.ns, Labels: ns.Labels}})).To(Succeed())
		// Meanwhile the agent's token is rejected and no recovery endpoint
		// answers: it keeps asking, and keeps its plan.
		failedMeanwhile(g, fleeetv1.ReasonRecoveryFailed, l.up.Spec.Management.RecoveryURL)
		// 3. Restore.
		out := l.fleetctl(g, "restore", "-f", backup)
		g.Expect(out).To(ContainSubstring(clusterName))
		// 4. The full manager: the Remote controller rebuilds the identity
		// (as grantIdentity does here) and the recovery endpoint serves.
		l.grantIdentity(g)
		l.stopRecovery = l.serveRecovery(t)
		// 5. The agent re-attaches by itself.
		recovered(g, key)
		restored := &fleeetv1.ProxyAssemblage{}
		g.Expect(l.mgmt.Client.Get(ctx, client.ObjectKeyFromObject(plan), restored)).To(Succeed())
		g.Expect(restored.Spec).To(Equal(plan.Spec), "the plan is the one it had")
		g.Expect(l.mirroredTag(g)).To(Equal("v1.0.0"))
	})
}

// fleetctl runs fleetctl against the management cluster in the tenant's
// namespace and returns what it printed.
func (l *linked) fleetctl(g Gomega, args ...string) string {
	cmd := fleetctl.NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--kubeconfig", l.mgmt.Kubeconfig, "--namespace", l.ns}, args...))
	g.Expect(cmd.ExecuteContext(context.Background())).To(Succeed(), out.String())
	return out.String()
}

func newPool(g Gomega, ca []byte) *tls.Config {
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(ca)).To(BeTrue())
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}
