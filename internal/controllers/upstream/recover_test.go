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
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
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
	remote := &fleeetv1.Remote{}
	g.Expect(l.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: clusterName}, remote)).To(Succeed())
	remote.Annotations = map[string]string{fleeetv1.RecoveryKeyAnnotation: recovery.PublicKey(key)}
	g.Expect(l.mgmt.Client.Update(ctx, remote)).To(Succeed())

	certDir, ca := testenv.ServingCertificate(t)
	addr := testenv.FreeAddr(t)
	stop, err := testenv.StartManager(l.mgmt, "fleet-manager", func(_ context.Context, mgr ctrl.Manager) error {
		return recovery.Add(mgr, "fleet-manager", recovery.Options{BindAddress: addr, CertDir: certDir})
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { stop(t.Failed()) })

	secret := &corev1.Secret{}
	g.Expect(l.down.Client.Get(ctx, client.ObjectKey{Namespace: l.up.Namespace, Name: l.up.Name + "-credential"}, secret)).To(Succeed())
	secret.Data[recovery.PrivateKeyKey] = recovery.EncodePrivate(key)
	g.Expect(l.down.Client.Update(ctx, secret)).To(Succeed())
	g.Expect(l.down.Client.Get(ctx, client.ObjectKeyFromObject(l.up), l.up)).To(Succeed())
	l.up.Spec.Management.RecoveryURL = "https://" + addr
	l.up.Spec.Management.RecoveryCABundle = ca
	g.Expect(l.down.Client.Update(ctx, l.up)).To(Succeed())
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

// TestAClusterRecoversByItselfAfterTheSigningKeyRotates: the management
// apiserver restarts with a new service-account signing key, so every
// token the cluster holds is rejected. The agent proves its recovery key
// to the manager's endpoint and is Ready again with no command, the
// Assemblage and Flux objects untouched meanwhile. The old key, a Remote
// that does not exist and a stale request are refused afterwards with the
// same generic answer; a request granted once is refused when replayed; and
// each recovery is an event on the Remote.
func TestAClusterRecoversByItselfAfterTheSigningKeyRotates(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	l := link(t)
	old := l.recoverable(t)
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))
	g.Eventually(func(g Gomega) {
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
	}, timeout, poll).Should(Succeed())
	before := l.settled(g)

	l.mgmt.RotateServiceAccountKey(t)
	g.Eventually(func(g Gomega) {
		g.Expect(l.recoveryKey(g).Equal(old)).To(BeFalse(), "the key is rotated")
		g.Expect(l.condition(g, fleeetv1.RegisteredCondition).Reason).To(Equal(fleeetv1.ReasonRegistered))
		g.Expect(l.condition(g, fleeetv1.ConnectedCondition).Reason).To(Equal(fleeetv1.ReasonConnected))
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
	}, 3*timeout, poll).Should(Succeed())
	g.Expect(l.downstreamState(g)).To(Equal(before), "nothing downstream was recreated or changed")
	g.Expect(l.mirroredTag(g)).To(Equal("v1.0.0"))

	remote := &fleeetv1.Remote{}
	g.Expect(l.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: clusterName}, remote)).To(Succeed())
	g.Expect(remote.Annotations[fleeetv1.RecoveryKeyAnnotation]).To(Equal(recovery.PublicKey(l.recoveryKey(g))))
	events := &corev1.EventList{}
	g.Expect(l.mgmt.Client.List(ctx, events, client.InNamespace(l.ns))).To(Succeed())
	g.Expect(events.Items).To(ContainElement(And(
		HaveField("Reason", fleeetv1.ReasonRecovered),
		HaveField("InvolvedObject.Name", clusterName),
		HaveField("Message", ContainSubstring("127.0.0.1")),
	)), "each recovery is recorded on the Remote, with where it came from")

	// A thief holding the old key (or a captured request) gains nothing.
	thief, err := recovery.NewKey()
	g.Expect(err).NotTo(HaveOccurred())
	code, body := post(g, l, encode(g, recovery.NewRequest(l.ns, clusterName, old, thief, time.Now())))
	g.Expect(code).To(Equal(http.StatusForbidden))
	g.Expect(body).To(Equal("recovery refused\n"))
	// The same answer for a Remote that does not exist: no oracle.
	code, body = post(g, l, encode(g, recovery.NewRequest(l.ns, "no-such-cluster", old, thief, time.Now())))
	g.Expect(code).To(Equal(http.StatusForbidden))
	g.Expect(body).To(Equal("recovery refused\n"))
	// A request signed with the current key but outside the time window.
	code, _ = post(g, l, encode(g, recovery.NewRequest(l.ns, clusterName, l.recoveryKey(g), thief, time.Now().Add(-time.Hour))))
	g.Expect(code).To(Equal(http.StatusForbidden))
	g.Expect(l.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: clusterName}, remote)).To(Succeed())
	g.Expect(remote.Annotations[fleeetv1.RecoveryKeyAnnotation]).To(Equal(recovery.PublicKey(l.recoveryKey(g))), "no refused request rotated the key")
	g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))

	// A request signed with the current key is granted once: sent again
	// as captured, it is refused.
	granted := encode(g, recovery.NewRequest(l.ns, clusterName, l.recoveryKey(g), thief, time.Now()))
	code, body = post(g, l, granted)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring(`"token":`))
	code, _ = post(g, l, granted)
	g.Expect(code).To(Equal(http.StatusForbidden), "a replay is refused")
}

// TestACredentialExpiredWhileOfflineIsRecovered: an agent that finds its
// stored credential past its expiry (offline longer than its life) asks
// the recovery endpoint instead of giving up. Token lifetimes are at least
// ten minutes in the TokenRequest API, so expiry is simulated honestly by
// the stored expiresAt alone: the token itself would still be accepted, so
// the agent takes this path only because it believes the token expired.
func TestACredentialExpiredWhileOfflineIsRecovered(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	l := link(t)
	old := l.recoverable(t)
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))
	before := l.settled(g)

	// The agent comes back after the credential's life: stopped, its
	// Secret says expired, started again.
	l.stopAgent()
	secret := &corev1.Secret{}
	g.Expect(l.down.Client.Get(ctx, client.ObjectKey{Namespace: l.up.Namespace, Name: l.up.Name + "-credential"}, secret)).To(Succeed())
	secret.Data[credential.ExpiresAtKey] = []byte(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	g.Expect(l.down.Client.Update(ctx, secret)).To(Succeed())
	l.runAgent(t)

	g.Eventually(func(g Gomega) {
		g.Expect(l.recoveryKey(g).Equal(old)).To(BeFalse(), "the key is rotated")
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
		g.Expect(l.up.Status.CredentialExpiresAt.Time).To(BeTemporally(">", time.Now()))
	}, 2*timeout, poll).Should(Succeed())
	g.Expect(l.downstreamState(g)).To(Equal(before))
}

// TestAnUnknownRemoteKeepsTheAgentRetrying: a rebuilt management cluster
// whose Remotes are not restored yet refuses recovery; the agent says so,
// keeps its plan and retries, and recovers once the Remote is back.
func TestAnUnknownRemoteKeepsTheAgentRetrying(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	l := link(t)
	l.recoverable(t)
	g.Eventually(l.mirroredTag, timeout, poll).Should(Equal("v1.0.0"))
	before := l.settled(g)

	// The management cluster is rebuilt while the agent is away: a new
	// signing key, and the Remote not restored yet.
	l.stopAgent()
	remote := &fleeetv1.Remote{}
	g.Expect(l.mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: clusterName}, remote)).To(Succeed())
	restored := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: clusterName, Annotations: remote.Annotations}}
	g.Expect(l.mgmt.Client.Delete(ctx, remote)).To(Succeed())
	l.mgmt.RotateServiceAccountKey(t)
	l.runAgent(t)

	g.Eventually(func(g Gomega) {
		registered := l.condition(g, fleeetv1.RegisteredCondition)
		g.Expect(registered.Reason).To(Equal(fleeetv1.ReasonRecoveryRefused))
		g.Expect(registered.Message).To(ContainSubstring("retrying"))
		g.Expect(registered.Message).To(ContainSubstring("another holder of this cluster's key recovered it"))
		g.Expect(l.condition(g, fleeetv1.StalledCondition).Status).To(Equal(metav1.ConditionFalse))
	}, timeout, poll).Should(Succeed())
	g.Expect(l.downstreamState(g)).To(Equal(before), "nothing downstream changes while refused")
	g.Expect(l.mirroredTag(g)).To(Equal("v1.0.0"))

	// The Remote is restored (from git and backup), recovery key included.
	g.Expect(l.mgmt.Client.Create(ctx, restored)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(l.condition(g, fleeetv1.ReadyCondition).Reason).To(Equal(fleeetv1.ReasonSynced))
	}, 2*timeout, poll).Should(Succeed())
	g.Expect(l.downstreamState(g)).To(Equal(before))
}

func newPool(g Gomega, ca []byte) *tls.Config {
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(ca)).To(BeTrue())
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}
