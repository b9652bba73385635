package manager_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/enrol"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// issueToken creates a RegistrationToken in the shared management cluster
// and returns the agent values the manager wrote into its Secret.
func issueToken(t *testing.T, ns, name string, spec fleeetv1.RegistrationTokenSpec) enrol.AgentValues {
	t.Helper()
	return issueTokenIn(t, cluster, ns, name, spec)
}

func issueTokenIn(t testing.TB, c *testenv.Cluster, ns, name string, spec fleeetv1.RegistrationTokenSpec) enrol.AgentValues {
	t.Helper()
	g := NewWithT(t)
	tok := &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	g.Expect(c.Client.Create(t.Context(), tok)).To(Succeed())
	var values enrol.AgentValues
	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(t.Context(), client.ObjectKeyFromObject(tok), tok)).To(Succeed())
		g.Expect(tok.Status.SecretName).NotTo(BeEmpty())
		secret := &corev1.Secret{}
		g.Expect(c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: tok.Status.SecretName}, secret)).To(Succeed())
		g.Expect(yaml.Unmarshal(secret.Data[enrol.ValuesKey], &values)).To(Succeed())
		g.Expect(values.Token).To(Equal(string(secret.Data[enrol.TokenKey])))
	}, timeout, poll).Should(Succeed())
	return values
}

// as is a client of the management cluster authenticated by token only.
func as(t *testing.T, token string) client.WithWatch {
	t.Helper()
	cfg := rest.AnonymousClientConfig(cluster.Config)
	cfg.BearerToken = token
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: cluster.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// refusesEach runs each attack as its own subtest, expecting 403 Forbidden.
func refusesEach(t *testing.T, attacks map[string]func() error) {
	for name, attack := range attacks {
		t.Run("refuses "+name, func(t *testing.T) {
			err := attack()
			NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		})
	}
}

func pullRemote(ns, name string, labels map[string]string) *fleeetv1.Remote {
	return &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
}

// register creates a Remote as the registration identity and returns a
// client holding the cluster's first credential, as an agent would.
func register(t *testing.T, reg client.Client, ns, name string) client.WithWatch {
	t.Helper()
	NewWithT(t).Expect(reg.Create(t.Context(), pullRemote(ns, name, nil))).To(Succeed())
	return firstCredential(t, reg, ns, name)
}

// firstCredential waits for the credential the manager issues a registered
// Remote and returns a client holding it.
func firstCredential(t *testing.T, reg client.Client, ns, name string) client.WithWatch {
	t.Helper()
	var token string
	NewWithT(t).Eventually(func(g Gomega) {
		secret := &corev1.Secret{}
		g.Expect(reg.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: enrol.RemoteIdentityName(name)}, secret)).To(Succeed())
		token = string(secret.Data[enrol.TokenKey])
		g.Expect(token).NotTo(BeEmpty())
	}, timeout, poll).Should(Succeed())
	return as(t, token)
}

func mintFor(ctx context.Context, c client.Client, ns, sa string) error {
	return c.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}},
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}})
}

func renewLease(ctx context.Context, c client.Client, ns, name string) error {
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, lease); err != nil {
		return err
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.RenewTime = &now
	return c.Update(ctx, lease)
}

func tokenStatus(g Gomega, ns, name string) *fleeetv1.RegistrationToken {
	tok := &fleeetv1.RegistrationToken{}
	g.Expect(cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, tok)).To(Succeed())
	return tok
}

func TestRegistrationTokenAdmitsExactlyItsRegistrationsAndNothingElse(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	values := issueToken(t, ns, "one", fleeetv1.RegistrationTokenSpec{RemoteLabels: map[string]string{"env": "edge"}})
	g.Expect(values.Management).To(Equal(enrol.Management{URL: cluster.Config.Host, CABundle: cluster.Config.CAData, Namespace: ns}))
	reg := as(t, values.Token)
	ctx := t.Context()

	forbidden := map[string]func() error{
		"reading Remotes": func() error { return reg.Get(ctx, client.ObjectKey{Namespace: ns, Name: "x"}, &fleeetv1.Remote{}) },
		"listing Remotes": func() error { return reg.List(ctx, &fleeetv1.RemoteList{}, client.InNamespace(ns)) },
		"creating a Module": func() error {
			m := newModule("v1.0.0", nil)
			m.Namespace = ns
			return reg.Create(ctx, m)
		},
		"reading its own token Secret": func() error {
			return reg.Get(ctx, client.ObjectKey{Namespace: ns, Name: enrol.RegistrationName("one")}, &corev1.Secret{})
		},
		"creating a Remote in another namespace": func() error { return reg.Create(ctx, pullRemote("default", "edge", nil)) },
		"setting a fleeet.dev/ label": func() error {
			return reg.Create(ctx, pullRemote(ns, "edge", map[string]string{fleeetv1.TenantLabel: "other"}))
		},
		"creating a push Remote": func() error {
			r := pullRemote(ns, "edge", nil)
			r.Spec.KubeconfigRef = &fleeetv1.SecretKeyReference{Name: "stolen", Key: "value"}
			return reg.Create(ctx, r)
		},
	}
	refusesEach(t, forbidden)
	t.Run("names the reserved label and the kubeconfig in its refusals", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(forbidden["setting a fleeet.dev/ label"]()).To(MatchError(ContainSubstring("metadata.labels[fleeet.dev/tenant]: keys under fleeet.dev/ are set only by the fleet manager")))
		g.Expect(forbidden["creating a push Remote"]()).To(MatchError(ContainSubstring("spec.kubeconfigRef: a registration creates a pull Remote")))
		g.Expect(tokenStatus(g, ns, "one").Status.Registered).To(BeEmpty(), "refused attempts use up nothing")
	})

	// Two agents race for the single registration: exactly one wins.
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, name := range []string{"race-a", "race-b"} {
		wg.Go(func() { errs[i] = reg.Create(ctx, pullRemote(ns, name, map[string]string{"region": "eu"})) })
	}
	wg.Wait()
	winner, loser := "race-a", "race-b"
	if errs[0] != nil {
		winner, loser = loser, winner
		errs[0], errs[1] = errs[1], errs[0]
	}
	g.Expect(errs[0]).NotTo(HaveOccurred())
	g.Expect(errs[1]).To(MatchError(ContainSubstring("RegistrationToken one is used up: 1 of 1 registrations")))
	g.Expect(apierrors.IsNotFound(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: loser}, &fleeetv1.Remote{}))).To(BeTrue())
	tok := tokenStatus(g, ns, "one")
	g.Expect(tok.Status.Registered).To(HaveLen(1))
	g.Expect(tok.Status.Registered[0].Name).To(Equal(winner))

	t.Run("refuses a second registration", func(t *testing.T) {
		err := reg.Create(ctx, pullRemote(ns, "late", nil))
		NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})

	// The winner gets the token's labels next to its own, an identity and
	// its first credential, readable by the registration identity only.
	cred := firstCredential(t, reg, ns, winner)
	g.Eventually(func(g Gomega) {
		r := &fleeetv1.Remote{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: winner}, r)).To(Succeed())
		g.Expect(r.Labels).To(Equal(map[string]string{"env": "edge", "region": "eu"}))
		c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.RegisteredCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Message).To(ContainSubstring("waiting for the agent to pick up its credential"))
	}, timeout, poll).Should(Succeed())
	g.Expect(cred.Get(ctx, client.ObjectKey{Namespace: ns, Name: winner}, &fleeetv1.Remote{})).To(Succeed())
	g.Expect(apimeta.FindStatusCondition(tokenStatus(g, ns, "one").Status.Conditions, fleeetv1.ReadyCondition).Reason).To(Equal("UsedUp"))

	// Connecting (the first heartbeat) retires the first credential and,
	// with the token used up, the registration identity: both tokens die.
	g.Expect(renewLease(ctx, cred, ns, winner)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: enrol.RemoteIdentityName(winner)}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "first-credential Secret deleted")
		err = reg.Create(ctx, pullRemote(ns, "after", nil))
		g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "registration token dead, got %v", err)
		err = cred.Get(ctx, client.ObjectKey{Namespace: ns, Name: winner}, &fleeetv1.Remote{})
		g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "first credential dead with its Secret, got %v", err)
	}, timeout, poll).Should(Succeed())
	tok = tokenStatus(g, ns, "one")
	g.Expect(tok.Status.SecretName).To(BeEmpty())
	g.Expect(apimeta.FindStatusCondition(tok.Status.Conditions, fleeetv1.ReadyCondition).Message).To(
		Equal("used up: 1 of 1 registrations; the registration identity is deleted"))
}

func TestRegistrationAfterTheTokenExpiredIsRefused(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	values := issueToken(t, ns, "brief", fleeetv1.RegistrationTokenSpec{TTL: &metav1.Duration{Duration: 4 * time.Second}})
	reg := as(t, values.Token)
	expires := tokenStatus(g, ns, "brief").Status.ExpiresAt.Time
	time.Sleep(time.Until(expires))
	err := reg.Create(t.Context(), pullRemote(ns, "edge", nil))
	// Refused by the webhook (expired) or, once the manager has retired the
	// identity, by authentication.
	g.Expect(apierrors.IsUnauthorized(err) || (apierrors.IsForbidden(err) && strings.Contains(err.Error(), "expired at"))).To(BeTrue(), "got %v", err)
	g.Eventually(func(g Gomega) {
		tok := tokenStatus(g, ns, "brief")
		g.Expect(apimeta.FindStatusCondition(tok.Status.Conditions, fleeetv1.ReadyCondition).Reason).To(Equal("Expired"))
		err := reg.Create(t.Context(), pullRemote(ns, "edge", nil))
		g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "got %v", err)
	}, timeout, poll).Should(Succeed())
	g.Expect(tokenStatus(g, ns, "brief").Status.Registered).To(BeEmpty())
}

func TestAClusterIdentityReachesOnlyItsOwnObjects(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	reg := as(t, issueToken(t, ns, "two", fleeetv1.RegistrationTokenSpec{MaxRegistrations: 2}).Token)
	// "edge" is a prefix of "edge-1": rights must match names exactly.
	edge, other := register(t, reg, ns, "edge"), register(t, reg, ns, "edge-1")
	ctx := t.Context()
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
	g.Eventually(func(g Gomega) { // the compiler has written both plans
		g.Expect(cluster.Client.Get(ctx, key("edge-1"), &fleeetv1.ProxyAssemblage{})).To(Succeed())
		g.Expect(cluster.Client.Get(ctx, key("edge"), &fleeetv1.ProxyAssemblage{})).To(Succeed())
	}, timeout, poll).Should(Succeed())
	byName := func(name string) *client.ListOptions {
		return &client.ListOptions{Namespace: ns, FieldSelector: fields.OneTermEqualSelector("metadata.name", name)}
	}
	otherPlan := func() *fleeetv1.ProxyAssemblage {
		pa := &fleeetv1.ProxyAssemblage{}
		g.Expect(cluster.Client.Get(ctx, key("edge-1"), pa)).To(Succeed())
		return pa
	}
	ownPlan := func() *fleeetv1.ProxyAssemblage {
		pa := &fleeetv1.ProxyAssemblage{}
		g.Expect(cluster.Client.Get(ctx, key("edge"), pa)).To(Succeed())
		return pa
	}

	attacks := map[string]func() error{
		"reading another cluster's Remote":          func() error { return edge.Get(ctx, key("edge-1"), &fleeetv1.Remote{}) },
		"reading another cluster's ProxyAssemblage": func() error { return edge.Get(ctx, key("edge-1"), &fleeetv1.ProxyAssemblage{}) },
		"writing another cluster's plan status": func() error {
			return edge.Status().Update(ctx, otherPlan())
		},
		"writing another cluster's Remote status": func() error {
			r := &fleeetv1.Remote{}
			g.Expect(cluster.Client.Get(ctx, key("edge-1"), r)).To(Succeed())
			return edge.Status().Update(ctx, r)
		},
		"renewing another cluster's Lease": func() error { return renewLease(ctx, edge, ns, "edge-1") },
		"watching another cluster's plan by name": func() error {
			w, err := edge.Watch(ctx, &fleeetv1.ProxyAssemblageList{}, byName("edge-1"))
			if err == nil {
				w.Stop()
			}
			return err
		},
		"listing every plan in the namespace": func() error { return edge.List(ctx, &fleeetv1.ProxyAssemblageList{}, client.InNamespace(ns)) },
		"minting a token for another cluster": func() error { return mintFor(ctx, edge, ns, enrol.RemoteIdentityName("edge-1")) },
		"writing its own plan's spec": func() error {
			pa := ownPlan()
			pa.Spec.Assemblage.ServiceAccountName = "cluster-admin"
			return edge.Update(ctx, pa)
		},
		"deleting its own Remote":    func() error { return edge.Delete(ctx, pullRemote(ns, "edge", nil)) },
		"creating another Remote":    func() error { return edge.Create(ctx, pullRemote(ns, "edge-2", nil)) },
		"reading Secrets":            func() error { return edge.Get(ctx, key(enrol.RemoteIdentityName("edge-1")), &corev1.Secret{}) },
		"reading RegistrationTokens": func() error { return edge.Get(ctx, key("two"), &fleeetv1.RegistrationToken{}) },
	}
	refusesEach(t, attacks)
	t.Run("allows its own objects", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(edge.Get(ctx, key("edge"), &fleeetv1.Remote{})).To(Succeed())
		g.Expect(edge.List(ctx, &fleeetv1.ProxyAssemblageList{}, byName("edge"))).To(Succeed())
		w, err := edge.Watch(ctx, &fleeetv1.ProxyAssemblageList{}, byName("edge"))
		g.Expect(err).NotTo(HaveOccurred())
		w.Stop()
		g.Expect(edge.Status().Update(ctx, ownPlan())).To(Succeed())
		g.Expect(renewLease(ctx, edge, ns, "edge")).To(Succeed())
		g.Expect(mintFor(ctx, edge, ns, enrol.RemoteIdentityName("edge"))).To(Succeed())
	})
	g.Expect(other.Get(ctx, key("edge-1"), &fleeetv1.Remote{})).To(Succeed())

	// A revoked cluster's tokens, including one it minted itself, stop working.
	own, err := enrol.Mint(ctx, edge, ns, enrol.RemoteIdentityName("edge"), time.Hour, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cluster.Client.Delete(ctx, pullRemote(ns, "edge", nil))).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := as(t, own.Value).Get(ctx, key("edge"), &fleeetv1.ProxyAssemblage{})
		g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "got %v", err)
		g.Expect(apierrors.IsNotFound(cluster.Client.Get(ctx, key("edge"), &fleeetv1.Remote{}))).To(BeTrue(), "finalizer released")
	}, timeout, poll).Should(Succeed())
	g.Expect(other.Get(ctx, key("edge-1"), &fleeetv1.Remote{})).To(Succeed(), "the other cluster is untouched")
}
