package testenv_test

import (
	"net/http"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// A private registry answers only its credentials; a password Rotate
// issued is accepted besides the earlier ones until one is revoked, and a
// password it never issued is not.
func TestPrivateRegistryAcceptsEveryPasswordItIssuedUntilRevoked(t *testing.T) {
	g := NewWithT(t)
	reg := testenv.NewPrivateRegistry(t)
	client := &http.Client{Transport: reg.Transport()}
	status := func(user, pass string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+reg.Host+"/v2/", nil)
		g.Expect(err).NotTo(HaveOccurred())
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		return resp.StatusCode
	}
	g.Expect(status(reg.Username, reg.Password)).To(Equal(http.StatusOK))
	g.Expect(status("", "")).To(Equal(http.StatusUnauthorized))
	rotated := reg.Rotate(t)
	g.Expect(rotated).NotTo(Equal(reg.Password))
	g.Expect(status(reg.Username, rotated)).To(Equal(http.StatusOK))
	g.Expect(status(reg.Username, reg.Password)).To(Equal(http.StatusOK), "the first password is still accepted")
	g.Expect(status("someone", rotated)).To(Equal(http.StatusUnauthorized))
	g.Expect(status(reg.Username, rotated+"0")).To(Equal(http.StatusUnauthorized))

	reg.Revoke(t, reg.Password)
	g.Expect(status(reg.Username, reg.Password)).To(Equal(http.StatusUnauthorized), "the first password is revoked")
	g.Expect(status(reg.Username, rotated)).To(Equal(http.StatusOK), "the rotated one still works")
	reg.Revoke(t, rotated)
	g.Expect(status(reg.Username, rotated)).To(Equal(http.StatusUnauthorized))
}
