package bootstrap_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/controllers/manager/bootstrap"
	"github.com/fleeet-dev/fleeet/internal/secrets"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

const (
	timeout = time.Minute
	poll    = 100 * time.Millisecond
)

// cluster is the management apiserver every test of the package shares, with
// the BootstrapModule controller running against it. No Flux controller
// runs: the tests look at the Flux objects the controller writes, and write
// their status as Flux would.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, nil, func(c *testenv.Cluster) (func(bool), error) {
		return testenv.StartManager(c, "bootstrap", func(_ context.Context, mgr ctrl.Manager) error {
			return (&bootstrap.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-manager"), FieldOwner: "fleet-manager"}).SetupWithManager(mgr)
		}, func(o *ctrl.Options) { o.NewCache = secrets.NewCache })
	}))
}

// edge is the downstream cluster every push Remote's kubeconfig points at;
// nothing listens there, which does not matter as long as Flux does not run.
var edge = clientcmdapi.Cluster{Server: "https://edge.example:6443"}

// tenant returns a fresh tenant namespace.
func tenant(t *testing.T) string {
	return cluster.Namespace(t, "tenant", map[string]string{fleeetv1.TenantLabel: "true"})
}

// pushRemote creates a push Remote with labels whose kubeconfig Secret,
// <name>-kubeconfig, holds kubeconfig (no Secret when it is nil), and
// returns the Remote and the Secret.
func pushRemote(t *testing.T, ns, name string, labels map[string]string, kubeconfig []byte) (*fleeetv1.Remote, *corev1.Secret) {
	t.Helper()
	g := NewWithT(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig", Namespace: ns}, Data: map[string][]byte{"value": kubeconfig}}
	if kubeconfig != nil {
		g.Expect(cluster.Client.Create(t.Context(), secret)).To(Succeed())
	}
	r := &fleeetv1.Remote{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: fleeetv1.RemoteSpec{
			KubeconfigRef:      &fleeetv1.SecretKeyReference{Name: secret.Name, Key: "value"},
			ServiceAccountName: "deployer",
		},
	}
	g.Expect(cluster.Client.Create(t.Context(), r)).To(Succeed())
	return r, secret
}

// inlineToken is a kubeconfig for edge with an inline token, which the
// manager hands to Flux.
func inlineToken(t *testing.T) []byte {
	return testenv.Kubeconfig(t, edge, clientcmdapi.AuthInfo{Token: "inline-token"})
}

// bootstrapFlux creates a BootstrapModule installing Flux from git at
// v2.7.0 into the push Remotes labelled bootstrap=yes; edit may change it
// first.
func bootstrapFlux(t *testing.T, ns string, edit func(*fleeetv1.BootstrapModule)) *fleeetv1.BootstrapModule {
	t.Helper()
	bm := &fleeetv1.BootstrapModule{
		ObjectMeta: metav1.ObjectMeta{Name: "flux", Namespace: ns},
		Spec: fleeetv1.BootstrapModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"bootstrap": "yes"}},
			Sync: fleeetv1.SyncSpec{
				Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example/flux.git", Tag: "v2.7.0"}},
				Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./install"}},
			},
		}},
	}
	if edit != nil {
		edit(bm)
	}
	NewWithT(t).Expect(cluster.Client.Create(t.Context(), bm)).To(Succeed())
	return bm
}

// judged reads the BootstrapModule once the controller has judged its
// current generation, and returns its Ready condition.
func judged(g Gomega, bm *fleeetv1.BootstrapModule) *metav1.Condition {
	g.ExpectWithOffset(1, cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(bm), bm)).To(Succeed())
	g.ExpectWithOffset(1, bm.Status.ObservedGeneration).To(Equal(bm.Generation))
	c := apimeta.FindStatusCondition(bm.Status.Conditions, fleeetv1.ReadyCondition)
	g.ExpectWithOffset(1, c).NotTo(BeNil(), "Ready in %v", bm.Status.Conditions)
	return c
}
