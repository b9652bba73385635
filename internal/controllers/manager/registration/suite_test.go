package registration_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/registration"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
)

// cluster is the management apiserver every test of the package shares, with
// the RegistrationToken and Remote identity controllers running against it
// and nothing else: no admission webhook, so the tests create the Remotes an
// agent would as the cluster administrator, and no compiler or health
// controller.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, nil, startRegistration))
}

// startRegistration runs the package's two controllers in-process against c,
// with c's address as the management URL written into agent values.
func startRegistration(c *testenv.Cluster) (func(bool), error) {
	return testenv.StartManager(c, "registration", func(ctx context.Context, mgr ctrl.Manager) error {
		recorder := mgr.GetEventRecorder("fleet-manager")
		tokens := &registration.TokenReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Concurrent: 2,
			Management: credential.Management{URL: c.Config.Host, CABundle: c.Config.CAData}}
		if err := tokens.SetupWithManager(mgr); err != nil {
			return err
		}
		return (&registration.RemoteReconciler{Client: countingDeletes{mgr.GetClient()}, APIReader: mgr.GetAPIReader(), Recorder: recorder, Concurrent: 2}).SetupWithManager(ctx, mgr)
	}, func(o *ctrl.Options) { o.NewCache = secrets.NewCache })
}

// secretDeletes counts, by namespace/name, the Secret deletions the Remote
// controller sent to the apiserver, whether or not they found the Secret.
var secretDeletes sync.Map // client.ObjectKey → *atomic.Int32

// countingDeletes is the Remote controller's client, counting its Secret
// deletions into secretDeletes.
type countingDeletes struct{ client.Client }

func (c countingDeletes) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		n, _ := secretDeletes.LoadOrStore(client.ObjectKeyFromObject(obj), new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	}
	return c.Client.Delete(ctx, obj, opts...)
}

// deletesOf is how many times the Remote controller has asked to delete
// the Secret of that name.
func deletesOf(key client.ObjectKey) int32 {
	if n, ok := secretDeletes.Load(key); ok {
		return n.(*atomic.Int32).Load()
	}
	return 0
}

// tenant returns a fresh namespace for one test.
func tenant(t *testing.T) string {
	return cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
}

// issue creates a RegistrationToken and waits until its Secret is written.
func issue(t *testing.T, ns, name string, spec fleeetv1.RegistrationTokenSpec) *fleeetv1.RegistrationToken {
	t.Helper()
	g := NewWithT(t)
	tok := &fleeetv1.RegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	g.Expect(cluster.Client.Create(t.Context(), tok)).To(Succeed())
	g.Eventually(func(g Gomega) {
		get(g, tok)
		g.Expect(tok.Status.SecretName).To(Equal(fleeetv1.RegistrationIdentityName(name)))
	}, timeout, poll).Should(Succeed())
	return tok
}

// registrant creates the Remote an agent creates through token: labelled
// with the token's name, next to the labels it asks for.
func registrant(t *testing.T, ns, token, name string, labels map[string]string) *fleeetv1.Remote {
	t.Helper()
	r := &fleeetv1.Remote{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{fleeetv1.RegistrationTokenLabel: token}}}
	for k, v := range labels {
		r.Labels[k] = v
	}
	NewWithT(t).Expect(cluster.Client.Create(t.Context(), r)).To(Succeed())
	return r
}

// get reads obj afresh from the apiserver.
func get(g Gomega, obj client.Object) {
	g.ExpectWithOffset(1, cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
}

// gone expects every object to be deleted.
func gone(g Gomega, objs ...client.Object) {
	for _, obj := range objs {
		err := cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		g.ExpectWithOffset(1, apierrors.IsNotFound(err)).To(BeTrue(), "%T %s still exists (%v)", obj, obj.GetName(), err)
	}
}

// condition returns a condition, failing when it is not set.
func condition(g Gomega, conds []metav1.Condition, typ string) *metav1.Condition {
	c := apimeta.FindStatusCondition(conds, typ)
	g.ExpectWithOffset(1, c).NotTo(BeNil(), "condition %s in %v", typ, conds)
	return c
}

// notes returns the notes of the events with reason about the object of
// kind and name in ns.
func notes(g Gomega, ns, kind, name, reason string) []string {
	list := &eventsv1.EventList{}
	g.ExpectWithOffset(1, cluster.Client.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// as is a client of the management cluster authenticated by a bearer
// token only, as an agent holds one.
func as(token string) client.Client {
	cfg := rest.AnonymousClientConfig(cluster.Config)
	cfg.BearerToken = token
	c, err := client.New(cfg, client.Options{Scheme: cluster.Client.Scheme()})
	if err != nil {
		panic(err) // the configuration is the cluster's own, which works
	}
	return c
}

// whoIs asks the apiserver whom a bearer token authenticates as.
func whoIs(ctx context.Context, token string) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	err := as(token).Create(ctx, review)
	return review.Status.UserInfo.Username, err
}

// rejected waits until the apiserver refuses token: it caches what a token
// authenticates as for a few seconds after its ServiceAccount or bound
// Secret is gone.
func rejected(t *testing.T, token, why string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		_, err := whoIs(t.Context(), token)
		g.Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "%s; got %v", why, err)
	}, timeout, poll).Should(Succeed())
}

// serviceAccount is the user name of the ServiceAccount ns/name.
func serviceAccount(ns, name string) string { return "system:serviceaccount:" + ns + ":" + name }

// stored is a client whose store holds objs, for unit tests of one
// reconcile; recorder collects its events.
func stored(objs ...client.Object) (client.Client, *events.FakeRecorder) {
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme).WithObjects(objs...).
		WithStatusSubresource(&fleeetv1.RegistrationToken{}, &fleeetv1.Remote{}).Build()
	return c, events.NewFakeRecorder(100)
}
