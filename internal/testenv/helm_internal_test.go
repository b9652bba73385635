package testenv

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// A process run with a ServiceAccount's kubeconfig outlives its first
// token: the kubeconfig names a token file, and a new token replaces it
// before the old one expires.
func TestServiceAccountKubeconfigRenewsItsToken(t *testing.T) {
	g := NewWithT(t)
	c := StartCluster(t, "management")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "renewed"}}
	g.Expect(c.Client.Create(t.Context(), sa)).To(Succeed())

	path := renewedKubeconfig(t, c, sa.Namespace, sa.Name, 500*time.Millisecond)
	cfg, err := clientcmd.LoadFromFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	auth := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	g.Expect(auth.Token).To(BeEmpty(), "the token is not written into the kubeconfig, where it could not change")
	g.Expect(auth.TokenFile).NotTo(BeEmpty())
	first, err := os.ReadFile(auth.TokenFile)
	g.Expect(err).NotTo(HaveOccurred())

	var renewed []byte
	g.Eventually(func() []byte {
		renewed, _ = os.ReadFile(auth.TokenFile)
		return renewed
	}).WithTimeout(30*time.Second).ShouldNot(Or(BeEmpty(), Equal(first)), "a new token replaces the first")

	// The new token is a valid one of the same ServiceAccount, and the
	// kubeconfig authenticates with what the file holds.
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := kubernetes.NewForConfig(rc)
	g.Expect(err).NotTo(HaveOccurred())
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(review.Status.UserInfo.Username).To(Equal("system:serviceaccount:default:renewed"))
}
