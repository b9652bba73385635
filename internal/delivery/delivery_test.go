package delivery_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/delivery"
)

func TestNamesAreTheSortedDistinctSecretsOfEverySync(t *testing.T) {
	g := NewWithT(t)
	sync := func(names ...string) fleeetv1.NamedSync {
		var s fleeetv1.NamedSync
		for _, n := range names {
			s.Secrets = append(s.Secrets, fleeetv1.SecretDelivery{Name: n})
		}
		return s
	}
	g.Expect(delivery.Names([]fleeetv1.NamedSync{sync("b", "a"), sync(), sync("a", "c")})).To(Equal([]string{"a", "b", "c"}))
	g.Expect(delivery.Names(nil)).To(BeEmpty())
}

func TestOnlySecretsTheirOwnerOfferedAreDeliverable(t *testing.T) {
	offered := map[string]string{fleeetv1.DeliverableLabel: "true"}
	for _, tc := range []struct {
		name   string
		secret corev1.Secret
		why    string
	}{
		{"offered", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Labels: offered}}, ""},
		{"unlabelled", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}}, "not labelled fleeet.dev/deliverable=true"},
		{"labelled false", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Labels: map[string]string{fleeetv1.DeliverableLabel: "false"}}}, "not labelled"},
		{"service account token", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Labels: offered}, Type: corev1.SecretTypeServiceAccountToken}, "ServiceAccount token"},
		{"cluster identity", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fleeetv1.RemoteIdentityName("edge"), Labels: offered}}, "belongs to fleeet"},
		{"bundle", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fleeetv1.DeliveryBundleName("edge"), Labels: offered}}, "belongs to fleeet"},
		{"registration token", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds",
			Labels: map[string]string{fleeetv1.DeliverableLabel: "true", fleeetv1.RegistrationTokenLabel: "t"}}}, "belongs to fleeet"},
		{"labelled the manager's", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds",
			Labels: map[string]string{fleeetv1.DeliverableLabel: "true", fleeetv1.ManagedByLabel: fleeetv1.ManagedByManager}}}, "belongs to fleeet"},
		{"owned by a fleeet object", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Labels: offered,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: fleeetv1.GroupVersion.String(), Kind: "Remote", Name: "edge"}}}}, "belongs to fleeet"},
		{"push kubeconfig", corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "edge-kubeconfig", Labels: offered}}, "kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tc.secret.Data = map[string][]byte{"password": []byte("check-value")}
			err := delivery.Check(&tc.secret, map[string]bool{"edge-kubeconfig": true})
			if tc.why == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.why)))
			g.Expect(err.Error()).To(ContainSubstring(tc.secret.Name))
			g.Expect(err.Error()).NotTo(ContainSubstring("check-value"))
		})
	}
}

func TestABundleRoundTripsAndRefusesWhatASecretCannotHold(t *testing.T) {
	g := NewWithT(t)
	items := map[string]delivery.Item{
		"git":    {Type: corev1.SecretTypeBasicAuth, Data: map[string][]byte{"username": []byte("u"), "password": []byte("p")}},
		"docker": {Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{".dockerconfigjson": []byte("{}")}},
	}
	data, err := delivery.Encode(items)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(data).To(HaveLen(2))
	back, err := delivery.Decode(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back).To(Equal(items))

	big := map[string]delivery.Item{"big": {Data: map[string][]byte{"v": []byte(strings.Repeat("x", delivery.MaxBundleBytes))}}}
	_, err = delivery.Encode(big)
	g.Expect(err).To(MatchError(ContainSubstring("more than the 1048576 a Secret may hold")))
	g.Expect(err.Error()).NotTo(ContainSubstring("xxxx"))

	_, err = delivery.Decode(map[string][]byte{"bad": []byte("not-json-value")})
	g.Expect(err).To(MatchError("bundle entry bad is not a delivered Secret"))
}
