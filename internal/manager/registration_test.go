package manager_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// issueToken creates a RegistrationToken in the shared management cluster
// and returns the agent values the manager wrote into its Secret.
func issueToken(t *testing.T, ns, name string, spec fleeetv1.RegistrationTokenSpec) credential.AgentValues {
	t.Helper()
	return issueTokenIn(t, cluster, ns, name, spec)
}

func issueTokenIn(t testing.TB, c *testenv.Cluster, ns, name string, spec fleeetv1.RegistrationTokenSpec) credential.AgentValues {
	t.Helper()
	g := NewWithT(t)
	tok := &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	g.Expect(c.Client.Create(t.Context(), tok)).To(Succeed())
	var values credential.AgentValues
	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(t.Context(), client.ObjectKeyFromObject(tok), tok)).To(Succeed())
		g.Expect(tok.Status.SecretName).NotTo(BeEmpty())
		secret := &corev1.Secret{}
		g.Expect(c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: tok.Status.SecretName}, secret)).To(Succeed())
		g.Expect(yaml.Unmarshal(secret.Data[credential.ValuesKey], &values)).To(Succeed())
		g.Expect(values.Token).To(Equal(string(secret.Data[credential.TokenKey])))
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

// registrantRemote is the Remote an agent creates through RegistrationToken
// token: labelled with the token's name, next to the labels it asks for.
func registrantRemote(ns, token, name string, labels map[string]string) *fleeetv1.Remote {
	r := pullRemote(ns, name, map[string]string{fleeetv1.RegistrationTokenLabel: token})
	maps.Copy(r.Labels, labels)
	return r
}

// register creates a Remote as the registration identity of token and
// returns a client holding the cluster's first credential, as an agent would.
func register(t *testing.T, reg client.Client, ns, token, name string) client.WithWatch {
	t.Helper()
	NewWithT(t).Expect(reg.Create(t.Context(), registrantRemote(ns, token, name, nil))).To(Succeed())
	return firstCredential(t, reg, ns, name)
}

// firstCredential waits for the credential the manager issues a registered
// Remote and returns a client holding it.
func firstCredential(t *testing.T, reg client.Client, ns, name string) client.WithWatch {
	t.Helper()
	var token string
	NewWithT(t).Eventually(func(g Gomega) {
		secret := &corev1.Secret{}
		g.Expect(reg.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: fleeetv1.RemoteIdentityName(name)}, secret)).To(Succeed())
		token = string(secret.Data[credential.TokenKey])
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
	values := issueToken(t, ns, "one", fleeetv1.RegistrationTokenSpec{
		RemoteLabels: map[string]string{"env": "edge"}, FreeLabelKeys: []string{"region"}})
	g.Expect(values.Management).To(Equal(credential.Management{URL: cluster.Config.Host, CABundle: cluster.Config.CAData, Namespace: ns}))
	reg := as(t, values.Token)
	ctx := t.Context()

	forbidden := map[string]func() error{
		"reading Remotes": func() error { return reg.Get(ctx, client.ObjectKey{Namespace: ns, Name: "x"}, &fleeetv1.Remote{}) },
		"listing Remotes": func() error { return reg.List(ctx, &fleeetv1.RemoteList{}, client.InNamespace(ns)) },
		"creating a Module": func() error {
			m := fleettest.NewModule("v1.0.0", nil)
			m.Namespace = ns
			return reg.Create(ctx, m)
		},
		"reading its own token Secret": func() error {
			return reg.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleeetv1.RegistrationIdentityName("one")}, &corev1.Secret{})
		},
		"creating a Remote in another namespace": func() error { return reg.Create(ctx, registrantRemote("default", "one", "edge", nil)) },
		"setting a fleeet.dev/ label": func() error {
			return reg.Create(ctx, registrantRemote(ns, "one", "edge", map[string]string{fleeetv1.TenantLabel: "other"}))
		},
		"creating a push Remote": func() error {
			r := registrantRemote(ns, "one", "edge", nil)
			r.Spec.KubeconfigRef = &fleeetv1.SecretKeyReference{Name: "stolen", Key: "value"}
			return reg.Create(ctx, r)
		},
		"creating a Remote that does not name its token": func() error { return reg.Create(ctx, pullRemote(ns, "edge", nil)) },
		"naming another token":                           func() error { return reg.Create(ctx, registrantRemote(ns, "other", "edge", nil)) },
	}
	refusesEach(t, forbidden)
	t.Run("names the reserved label, the kubeconfig and the token label in its refusals", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(forbidden["setting a fleeet.dev/ label"]()).To(MatchError(ContainSubstring("metadata.labels[fleeet.dev/tenant]: keys under fleeet.dev/ are set only by the fleet manager")))
		g.Expect(forbidden["creating a push Remote"]()).To(MatchError(ContainSubstring("spec.kubeconfigRef: a registration creates a pull Remote")))
		g.Expect(forbidden["naming another token"]()).To(MatchError(ContainSubstring("metadata.labels[fleeet.dev/registration-token]: a registered Remote names its RegistrationToken, one")))
		g.Expect(tokenStatus(g, ns, "one").Status.Registered).To(BeEmpty(), "refused attempts use up nothing")
	})

	// Two agents race for the single registration. The webhook judges on
	// what is stored, so both may pass it; the manager then records exactly
	// one, and refuses and removes the other.
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, name := range []string{"race-a", "race-b"} {
		wg.Go(func() {
			errs[i] = reg.Create(ctx, registrantRemote(ns, "one", name, map[string]string{"region": "eu"}))
		})
	}
	wg.Wait()
	g.Expect(errs[0] == nil || errs[1] == nil).To(BeTrue(), "one agent registers, got %v", errs)
	for _, err := range errs {
		if err != nil {
			g.Expect(err).To(MatchError(ContainSubstring("RegistrationToken one is used up: 1 of 1 registrations")))
		}
	}
	var winner, loser string
	g.Eventually(func(g Gomega) {
		tok := tokenStatus(g, ns, "one")
		g.Expect(tok.Status.Registered).To(HaveLen(1))
		winner = tok.Status.Registered[0].Name
		g.Expect(winner).To(BeElementOf("race-a", "race-b"))
		loser = map[string]string{"race-a": "race-b", "race-b": "race-a"}[winner]
		g.Expect(apierrors.IsNotFound(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: loser}, &fleeetv1.Remote{}))).To(BeTrue(), "the surplus Remote is removed")
	}, timeout, poll).Should(Succeed())
	if errs[0] == nil && errs[1] == nil {
		t.Logf("both agents passed the webhook; the manager refused and removed %s", loser)
		g.Expect(refusalEvents(g, ns, "one")).To(ContainElement(ContainSubstring("Remote " + loser)))
	}

	t.Run("refuses a second registration, saying the token is used up", func(t *testing.T) {
		err := reg.Create(ctx, registrantRemote(ns, "one", "late", nil))
		NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("RegistrationToken one is used up: 1 of 1 registrations")))
	})

	// The winner gets the token's labels next to the one it was free to
	// choose, an identity and its first credential, readable by the
	// registration identity only. The loser never got an identity.
	cred := firstCredential(t, reg, ns, winner)
	g.Eventually(func(g Gomega) {
		r := &fleeetv1.Remote{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: winner}, r)).To(Succeed())
		g.Expect(r.Labels).To(Equal(map[string]string{"env": "edge", "region": "eu", fleeetv1.RegistrationTokenLabel: "one"}))
		c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.RegisteredCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Message).To(ContainSubstring("waiting for the agent to pick up its credential"))
	}, timeout, poll).Should(Succeed())
	g.Expect(cred.Get(ctx, client.ObjectKey{Namespace: ns, Name: winner}, &fleeetv1.Remote{})).To(Succeed())
	err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleeetv1.RemoteIdentityName(loser)}, &corev1.ServiceAccount{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no identity for the surplus Remote, got %v", err)
	g.Eventually(func(g Gomega) string {
		return apimeta.FindStatusCondition(tokenStatus(g, ns, "one").Status.Conditions, fleeetv1.ReadyCondition).Reason
	}, timeout, poll).Should(Equal("UsedUp"))

	// Connecting (the first heartbeat) retires the first credential. The
	// used-up token's identity stays until the token expires, so a late
	// agent is told the token is used up rather than refused unexplained.
	g.Expect(renewLease(ctx, cred, ns, winner)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleeetv1.RemoteIdentityName(winner)}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "first-credential Secret deleted")
		err = cred.Get(ctx, client.ObjectKey{Namespace: ns, Name: winner}, &fleeetv1.Remote{})
		g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "first credential dead with its Secret, got %v", err)
	}, timeout, poll).Should(Succeed())
	err = reg.Create(ctx, registrantRemote(ns, "one", "after", nil))
	g.Expect(err).To(MatchError(ContainSubstring("RegistrationToken one is used up: 1 of 1 registrations")))
	tok := tokenStatus(g, ns, "one")
	g.Expect(tok.Status.SecretName).To(Equal(fleeetv1.RegistrationIdentityName("one")))
	g.Expect(apimeta.FindStatusCondition(tok.Status.Conditions, fleeetv1.ReadyCondition).Message).To(
		HavePrefix("used up: 1 of 1 registrations; the registration identity stays until "))
}

// refusalEvents returns the notes of the RegistrationRefused events on a token.
func refusalEvents(g Gomega, ns, token string) []string {
	events := &eventsv1.EventList{}
	g.Expect(cluster.Client.List(context.Background(), events, client.InNamespace(ns))).To(Succeed())
	var notes []string
	for _, e := range events.Items {
		if e.Regarding.Kind == "RegistrationToken" && e.Regarding.Name == token && e.Reason == "RegistrationRefused" {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

func TestRegistrationAfterTheTokenExpiredIsRefused(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	values := issueToken(t, ns, "brief", fleeetv1.RegistrationTokenSpec{TTL: &metav1.Duration{Duration: 4 * time.Second}})
	reg := as(t, values.Token)
	expires := tokenStatus(g, ns, "brief").Status.ExpiresAt.Time
	time.Sleep(time.Until(expires))
	err := reg.Create(t.Context(), registrantRemote(ns, "brief", "edge", nil))
	// Refused by the webhook (expired) or, once the manager has retired the
	// identity, by authentication.
	g.Expect(apierrors.IsUnauthorized(err) || (apierrors.IsForbidden(err) && strings.Contains(err.Error(), "expired at"))).To(BeTrue(), "got %v", err)
	g.Eventually(func(g Gomega) {
		tok := tokenStatus(g, ns, "brief")
		g.Expect(apimeta.FindStatusCondition(tok.Status.Conditions, fleeetv1.ReadyCondition).Reason).To(Equal("Expired"))
		err := reg.Create(t.Context(), registrantRemote(ns, "brief", "edge", nil))
		g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "got %v", err)
	}, timeout, poll).Should(Succeed())
	g.Expect(tokenStatus(g, ns, "brief").Status.Registered).To(BeEmpty())
}

func TestAClusterIdentityReachesOnlyItsOwnObjects(t *testing.T) {
	g := NewWithT(t)
	ns := tenant(t)
	reg := as(t, issueToken(t, ns, "two", fleeetv1.RegistrationTokenSpec{MaxRegistrations: 2}).Token)
	// "edge" is a prefix of "edge-1": rights must match names exactly.
	edge, other := register(t, reg, ns, "two", "edge"), register(t, reg, ns, "two", "edge-1")
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
		"minting a token for another cluster": func() error { return mintFor(ctx, edge, ns, fleeetv1.RemoteIdentityName("edge-1")) },
		"writing its own plan's spec": func() error {
			pa := ownPlan()
			pa.Spec.Assemblage.ServiceAccountName = "cluster-admin"
			return edge.Update(ctx, pa)
		},
		"deleting its own Remote":    func() error { return edge.Delete(ctx, pullRemote(ns, "edge", nil)) },
		"creating another Remote":    func() error { return edge.Create(ctx, pullRemote(ns, "edge-2", nil)) },
		"reading Secrets":            func() error { return edge.Get(ctx, key(fleeetv1.RemoteIdentityName("edge-1")), &corev1.Secret{}) },
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
		g.Expect(mintFor(ctx, edge, ns, fleeetv1.RemoteIdentityName("edge"))).To(Succeed())
	})
	g.Expect(other.Get(ctx, key("edge-1"), &fleeetv1.Remote{})).To(Succeed())

	// A revoked cluster's tokens, including one it minted itself, stop working.
	own, err := credential.Mint(ctx, edge, ns, fleeetv1.RemoteIdentityName("edge"), time.Hour, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cluster.Client.Delete(ctx, pullRemote(ns, "edge", nil))).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := as(t, own.Value).Get(ctx, key("edge"), &fleeetv1.ProxyAssemblage{})
		g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "got %v", err)
		g.Expect(apierrors.IsNotFound(cluster.Client.Get(ctx, key("edge"), &fleeetv1.Remote{}))).To(BeTrue(), "finalizer released")
	}, timeout, poll).Should(Succeed())
	g.Expect(other.Get(ctx, key("edge-1"), &fleeetv1.Remote{})).To(Succeed(), "the other cluster is untouched")
}

// postToWebhook sends review straight to the manager's webhook server, as
// anything that can reach its port could, without the apiserver.
func postToWebhook(t *testing.T, review *admissionv1.AdmissionReview) *admissionv1.AdmissionResponse {
	t.Helper()
	g := NewWithT(t)
	roots := x509.NewCertPool()
	g.Expect(roots.AppendCertsFromPEM(cluster.Webhooks.LocalServingCAData)).To(BeTrue())
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	body, err := json.Marshal(review)
	g.Expect(err).NotTo(HaveOccurred())
	url := "https://" + net.JoinHostPort(cluster.Webhooks.LocalServingHost, strconv.Itoa(cluster.Webhooks.LocalServingPort)) + "/validate"
	resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	answer := &admissionv1.AdmissionReview{}
	g.Expect(json.NewDecoder(resp.Body).Decode(answer)).To(Succeed())
	g.Expect(answer.Response).NotTo(BeNil())
	return answer.Response
}

// An AdmissionReview that did not come from the apiserver, naming a
// registration identity and its ServiceAccount's UID, must not use up a
// registration: admission only judges, and the manager records a
// registration from the Remote the apiserver actually stored.
func TestAnAdmissionReviewThatDidNotComeFromTheAPIServerRecordsNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	values := issueToken(t, ns, "edge", fleeetv1.RegistrationTokenSpec{})
	sa := &corev1.ServiceAccount{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleeetv1.RegistrationIdentityName("edge")}, sa)).To(Succeed())

	forged := registrantRemote(ns, "edge", "forged", nil)
	forged.TypeMeta = metav1.TypeMeta{APIVersion: fleeetv1.GroupVersion.String(), Kind: "Remote"}
	forged.UID = "00000000-0000-4000-8000-000000000001"
	raw, err := json.Marshal(forged)
	g.Expect(err).NotTo(HaveOccurred())
	answer := postToWebhook(t, &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "00000000-0000-4000-8000-000000000002",
			Kind:      metav1.GroupVersionKind{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Kind: "Remote"},
			Resource:  metav1.GroupVersionResource{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Resource: "remotes"},
			Name:      forged.Name,
			Namespace: ns,
			Operation: admissionv1.Create,
			UserInfo: authenticationv1.UserInfo{
				Username: "system:serviceaccount:" + ns + ":" + sa.Name, UID: string(sa.UID),
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			},
			Object: runtime.RawExtension{Raw: raw},
		},
	})
	t.Logf("the webhook answered the forged review: allowed=%v %s", answer.Allowed, answer.Result.String())
	g.Expect(tokenStatus(g, ns, "edge").Status.Registered).To(BeEmpty(), "a forged review records no registration")

	// The token's one registration is still there for a real agent.
	reg := as(t, values.Token)
	register(t, reg, ns, "edge", "real")
	tok := tokenStatus(g, ns, "edge")
	g.Expect(tok.Status.Registered).To(HaveLen(1))
	g.Expect(tok.Status.Registered[0].Name).To(Equal("real"))
}

// A leaked token must not let its holder place a cluster under other
// Modules' selectors: a registered Remote carries the token's labels, and
// others only under keys the token frees.
func TestARegisteredRemoteCarriesOnlyTheLabelsItsTokenSetsOrFrees(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	closed := as(t, issueToken(t, ns, "closed", fleeetv1.RegistrationTokenSpec{RemoteLabels: map[string]string{"env": "edge"}}).Token)
	err := closed.Create(ctx, registrantRemote(ns, "closed", "spoof", map[string]string{"tier": "payments"}))
	denied(g, err, "metadata.labels[tier]: RegistrationToken closed does not let a registrant choose this label; list it in the token's spec.freeLabelKeys")
	g.Expect(apierrors.IsNotFound(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "spoof"}, &fleeetv1.Remote{}))).To(BeTrue())

	open := as(t, issueToken(t, ns, "open", fleeetv1.RegistrationTokenSpec{
		RemoteLabels: map[string]string{"env": "edge"}, FreeLabelKeys: []string{"region"}}).Token)
	g.Expect(open.Create(ctx, registrantRemote(ns, "open", "edge-eu", map[string]string{"region": "eu", "env": "edge"}))).To(Succeed())
	g.Eventually(func(g Gomega) {
		r := &fleeetv1.Remote{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-eu"}, r)).To(Succeed())
		g.Expect(r.Labels).To(Equal(map[string]string{"env": "edge", "region": "eu", fleeetv1.RegistrationTokenLabel: "open"}))
		g.Expect(r.Finalizers).NotTo(BeEmpty(), "adopted")
	}, timeout, poll).Should(Succeed())
}

func TestOnlyTheManagerWritesARegistrationTokensStatus(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	reg := as(t, issueToken(t, ns, "edge", fleeetv1.RegistrationTokenSpec{}).Token)
	register(t, reg, ns, "edge", "first")
	alice, _ := impersonate(t, "alice", ns)

	attacks := map[string]func(*fleeetv1.RegistrationToken){
		"forgetting its registrations": func(tok *fleeetv1.RegistrationToken) { tok.Status.Registered, tok.Status.Registrations = nil, 0 },
		"moving its expiry a year ahead": func(tok *fleeetv1.RegistrationToken) {
			tok.Status.ExpiresAt = &metav1.Time{Time: time.Now().Add(365 * 24 * time.Hour)}
		},
	}
	for name, change := range attacks {
		t.Run("refuses a tenant "+name, func(t *testing.T) {
			g := NewWithT(t)
			tok := &fleeetv1.RegistrationToken{}
			g.Expect(alice.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, tok)).To(Succeed())
			change(tok)
			denied(g, alice.Status().Update(ctx, tok), "status: the status of RegistrationToken edge records its registrations and is written only by the fleet manager, not by alice")
		})
	}
	g.Expect(tokenStatus(g, ns, "edge").Status.Registered).To(HaveLen(1))
}

// The right to renew its credential must not let a cluster mint itself a
// longer-lived one, or one bound to an object.
func TestAClusterMintsItselfNoCredentialBeyondTheCredentialLifetime(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	edge := register(t, as(t, issueToken(t, ns, "edge", fleeetv1.RegistrationTokenSpec{}).Token), ns, "edge", "edge")
	self := fleeetv1.RemoteIdentityName("edge")

	_, err := credential.Mint(ctx, edge, ns, self, 365*24*time.Hour, nil)
	denied(g, err, "spec.expirationSeconds: a cluster identity's tokens live at most 86400 seconds, not 31536000")
	bound := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "anything", UID: "00000000-0000-4000-8000-000000000003"}}
	_, err = credential.Mint(ctx, edge, ns, self, time.Hour, bound)
	denied(g, err, "spec.boundObjectRef: a cluster identity's tokens are bound to no object")

	own, err := credential.Mint(ctx, edge, ns, self, credential.Lifetime, nil)
	g.Expect(err).NotTo(HaveOccurred(), "the renewal the agent does")
	g.Expect(own.ExpiresAt).To(BeTemporally("~", time.Now().Add(credential.Lifetime), time.Minute))
	_, err = credential.Mint(ctx, cluster.Client, ns, self, 365*24*time.Hour, nil)
	g.Expect(err).NotTo(HaveOccurred(), "other identities are not judged")
}

// A Lease someone else made under a Remote's name must not become the
// cluster's heartbeat: its renewals would pass for the agent connecting.
func TestARegisteredRemoteAdoptsNoLeaseItDoesNotControl(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	now := metav1.NewMicroTime(time.Now())
	foreign := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone"), RenewTime: &now}}
	g.Expect(cluster.Client.Create(ctx, foreign)).To(Succeed())
	reg := as(t, issueToken(t, ns, "edge", fleeetv1.RegistrationTokenSpec{}).Token)
	g.Expect(reg.Create(ctx, registrantRemote(ns, "edge", "edge", nil))).To(Succeed())

	g.Eventually(func(g Gomega) {
		r := &fleeetv1.Remote{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, r)).To(Succeed())
		c := apimeta.FindStatusCondition(r.Status.Conditions, fleeetv1.RegisteredCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal("LeaseConflict"))
		g.Expect(c.Message).To(ContainSubstring("Lease " + ns + "/edge exists and is not controlled by this Remote"))
	}, timeout, poll).Should(Succeed())
	lease := &coordinationv1.Lease{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(foreign), lease)).To(Succeed())
	g.Expect(lease.OwnerReferences).To(BeEmpty(), "the foreign Lease is left alone")
	err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleeetv1.RemoteIdentityName("edge")}, &corev1.ServiceAccount{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no identity while the Lease is not the Remote's, got %v", err)

	// Once the foreign Lease is gone, the cluster gets its own.
	g.Expect(cluster.Client.Delete(ctx, foreign)).To(Succeed())
	firstCredential(t, reg, ns, "edge")
	g.Eventually(func(g Gomega) {
		g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(foreign), lease)).To(Succeed())
		g.Expect(lease.OwnerReferences).To(HaveLen(1))
		g.Expect(lease.Spec.RenewTime).To(BeNil())
	}, timeout, poll).Should(Succeed())
}

// A Remote labelled as created through a token that the token cannot
// record (it raced past the webhook's count, or was created after expiry)
// gets no identity: the manager refuses it, says so on the token, and
// deletes it. The manager's own identity stands in for such an agent here,
// since the webhook refuses anyone else the label.
func TestRemotesATokenCannotRecordAreRefusedAndRemoved(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	reg := as(t, issueToken(t, ns, "one", fleeetv1.RegistrationTokenSpec{}).Token)
	register(t, reg, ns, "one", "first")
	g.Expect(cluster.Client.Create(ctx, registrantRemote(ns, "one", "surplus", nil))).To(Succeed())

	issueToken(t, ns, "brief", fleeetv1.RegistrationTokenSpec{TTL: &metav1.Duration{Duration: 3 * time.Second}, MaxRegistrations: 5})
	time.Sleep(time.Until(tokenStatus(g, ns, "brief").Status.ExpiresAt.Time))
	g.Expect(cluster.Client.Create(ctx, registrantRemote(ns, "brief", "late", nil))).To(Succeed())

	for token, name := range map[string]string{"one": "surplus", "brief": "late"} {
		g.Eventually(func(g Gomega) {
			err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &fleeetv1.Remote{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Remote %s removed, got %v", name, err)
			g.Expect(refusalEvents(g, ns, token)).To(ContainElement(ContainSubstring("Remote " + name)))
		}, timeout, poll).Should(Succeed())
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleeetv1.RemoteIdentityName(name)}, &corev1.ServiceAccount{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no identity for %s, got %v", name, err)
	}
	g.Expect(refusalEvents(g, ns, "one")).To(ContainElement(ContainSubstring("RegistrationToken one is used up: 1 of 1 registrations")))
	g.Expect(refusalEvents(g, ns, "brief")).To(ContainElement(ContainSubstring("created after RegistrationToken brief expired")))
	tok := tokenStatus(g, ns, "one")
	g.Expect(tok.Status.Registered).To(HaveLen(1))
	g.Expect(tok.Status.Registered[0].Name).To(Equal("first"))
	g.Expect(tokenStatus(g, ns, "brief").Status.Registered).To(BeEmpty())
}

// An agent that comes late to a used-up token is told so, not refused by
// RBAC or authentication without a reason, also once every registered
// cluster has picked up its credential.
func TestAnAgentLateForAUsedUpTokenIsToldItIsUsedUp(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := tenant(t)
	reg := as(t, issueToken(t, ns, "one", fleeetv1.RegistrationTokenSpec{}).Token)
	cred := register(t, reg, ns, "one", "first")
	g.Eventually(func(g Gomega) {
		c := apimeta.FindStatusCondition(tokenStatus(g, ns, "one").Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal("UsedUp"))
	}, timeout, poll).Should(Succeed())
	usedUp := "RegistrationToken one is used up: 1 of 1 registrations"
	denied(g, reg.Create(ctx, registrantRemote(ns, "one", "late", nil)), usedUp)

	g.Expect(renewLease(ctx, cred, ns, "first")).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleeetv1.RemoteIdentityName("first")}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the first credential is picked up")
		c := apimeta.FindStatusCondition(tokenStatus(g, ns, "one").Status.Conditions, fleeetv1.ReadyCondition)
		g.Expect(c.Message).NotTo(ContainSubstring("waiting for"))
	}, timeout, poll).Should(Succeed())
	denied(g, reg.Create(ctx, registrantRemote(ns, "one", "later", nil)), usedUp)
}
