package testenv

import (
	"crypto/tls"
	"io"
	"net/http"
	"time"

	"github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// metricsReaderRole is the ClusterRole MetricsReaderToken creates when it is
// given none: the one right a metrics scraper needs, as the charts' own
// <release>-metrics-reader grants it.
const metricsReaderRole = "fleeet-test-metrics-reader"

// MetricsReaderToken returns a token of a new ServiceAccount of c bound to
// clusterRole, as a Prometheus ServiceAccount would be bound to a chart's
// <release>-metrics-reader; an empty clusterRole binds metricsReaderRole,
// created if missing, for binaries the test runs without their chart.
func MetricsReaderToken(t TB, c *Cluster, clusterRole string) string {
	t.Helper()
	ctx := t.Context()
	if clusterRole == "" {
		clusterRole = metricsReaderRole
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: clusterRole},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
		if err := c.Client.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating ClusterRole %s: %v", clusterRole, err)
		}
	}
	ns := c.Namespace(t, "monitoring", nil)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prometheus"}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-" + rand.String(5)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
	}
	if err := c.Client.Create(ctx, sa); err != nil {
		t.Fatalf("creating ServiceAccount %s/%s: %v", ns, sa.Name, err)
	}
	if err := c.Client.Create(ctx, binding); err != nil {
		t.Fatalf("binding ClusterRole %s: %v", clusterRole, err)
	}
	// The apiserver's authorizer learns of the binding a moment later, and
	// a component that asked before then caches the denial: wait until the
	// apiserver allows the scrape.
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:                  "system:serviceaccount:" + ns + ":" + sa.Name,
		Groups:                []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		answer := review.DeepCopy()
		if err := c.Client.Create(ctx, answer); err != nil {
			t.Fatalf("asking whether %s may read /metrics: %v", review.Spec.User, err)
		}
		if answer.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s may not read /metrics 30 s after its binding to %s: %s", review.Spec.User, clusterRole, answer.Status.Reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ServiceAccountToken(t, c, ns, sa.Name)
}

// metricsClient reaches metrics endpoints, which serve a self-signed
// certificate unless given one: the tests check who may read them, not the
// certificate.
var metricsClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // see above
}

// ScrapeMetrics reads https://addr/metrics presenting token as a bearer
// token (none when empty) and returns the response's status and body.
func ScrapeMetrics(g gomega.Gomega, addr, token string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	g.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := metricsClient.Do(req)
	g.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	g.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred())
	return resp.StatusCode, string(body)
}

// Metrics is ScrapeMetrics for a caller that must be let in: it fails g
// unless the status is 200 and returns the body.
func Metrics(g gomega.Gomega, addr, token string) string {
	status, body := ScrapeMetrics(g, addr, token)
	g.ExpectWithOffset(1, status).To(gomega.Equal(http.StatusOK), body)
	return body
}
