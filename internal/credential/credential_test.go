package credential_test

import (
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	"github.com/fleeet-dev/fleeet/internal/credential"
)

// secretValue stands for bearer-token material; no error may carry it.
const secretValue = "eyJhbGciOiJSUzI1NiJ9.c2VrcmV0.c2lnbmF0dXJl"

func TestATokenSurvivesTheRoundTripThroughASecretToTheSecond(t *testing.T) {
	g := NewWithT(t)
	berlin := time.FixedZone("CEST", 2*60*60)
	token := credential.Token{Value: secretValue, ExpiresAt: time.Date(2030, 1, 2, 5, 4, 5, 999_000_000, berlin)}

	data := token.SecretData()
	g.Expect(data).To(HaveLen(2))
	g.Expect(string(data[credential.TokenKey])).To(Equal(secretValue))
	g.Expect(string(data[credential.ExpiresAtKey])).To(Equal("2030-01-02T03:04:05Z"), "RFC 3339 in UTC")

	got, err := credential.TokenFromSecret(&corev1.Secret{Data: data})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Value).To(Equal(secretValue))
	g.Expect(got.ExpiresAt).To(BeTemporally("==", token.ExpiresAt.Truncate(time.Second)))
}

func TestTokenFromSecretValidatesTheSecretWithoutRepeatingTheToken(t *testing.T) {
	expiry := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, tc := range map[string]struct {
		data    map[string]string
		want    credential.Token
		wantErr []string // substrings of the error; nil: no error
	}{
		"token and expiry": {
			data: map[string]string{"token": secretValue, "expiresAt": "2030-01-02T03:04:05Z"},
			want: credential.Token{Value: secretValue, ExpiresAt: expiry},
		},
		"expiry in another zone": {
			data: map[string]string{"token": secretValue, "expiresAt": "2030-01-02T05:04:05+02:00"},
			want: credential.Token{Value: secretValue, ExpiresAt: expiry},
		},
		"token of unknown expiry": {
			data: map[string]string{"token": secretValue},
			want: credential.Token{Value: secretValue},
		},
		"token written by hand with a trailing newline": {
			data: map[string]string{"token": " " + secretValue + "\n"},
			want: credential.Token{Value: secretValue},
		},
		"no token": {
			data:    map[string]string{"expiresAt": "2030-01-02T03:04:05Z"},
			wantErr: []string{"team-a/upstream-credential", `"token"`},
		},
		"blank token": {
			data:    map[string]string{"token": " \n", "expiresAt": "2030-01-02T03:04:05Z"},
			wantErr: []string{"team-a/upstream-credential", `"token"`},
		},
		"expiry not RFC 3339": {
			data:    map[string]string{"token": secretValue, "expiresAt": "2030-01-02 03:04:05"},
			wantErr: []string{"team-a/upstream-credential", `"expiresAt"`},
		},
		"empty expiry": {
			data:    map[string]string{"token": secretValue, "expiresAt": ""},
			wantErr: []string{"team-a/upstream-credential", `"expiresAt"`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "upstream-credential"}, Data: map[string][]byte{}}
			for k, v := range tc.data {
				s.Data[k] = []byte(v)
			}
			got, err := credential.TokenFromSecret(s)
			if tc.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got.Value).To(Equal(tc.want.Value))
				g.Expect(got.ExpiresAt).To(BeTemporally("==", tc.want.ExpiresAt))
				return
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(got).To(BeZero())
			for _, want := range tc.wantErr {
				g.Expect(err.Error()).To(ContainSubstring(want))
			}
			g.Expect(err.Error()).NotTo(ContainSubstring(secretValue))
		})
	}
}

func TestATokenIsRenewedAfterFourFifthsOfItsLifetime(t *testing.T) {
	obtained := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		expiresAt time.Time
		want      time.Time
	}{
		"own identity, a day":         {expiresAt: obtained.Add(credential.Lifetime), want: obtained.Add(19*time.Hour + 12*time.Minute)},
		"first credential, 10m":       {expiresAt: obtained.Add(credential.FirstLifetime), want: obtained.Add(8 * time.Minute)},
		"an odd lifetime, 1h1m15s":    {expiresAt: obtained.Add(time.Hour + time.Minute + 15*time.Second), want: obtained.Add(49 * time.Minute)},
		"expiry in another time zone": {expiresAt: obtained.Add(time.Hour).In(time.FixedZone("X", -7*60*60)), want: obtained.Add(48 * time.Minute)},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := credential.Token{Value: secretValue, ExpiresAt: tc.expiresAt}.RenewAt(obtained)
			g.Expect(got).To(BeTemporally("==", tc.want))
		})
	}
}

// A token that has expired, or whose expiry is unknown, is replaced at
// once rather than trusted for a lifetime it may not have.
func TestATokenExpiredOrOfUnknownExpiryIsRenewedAtOnce(t *testing.T) {
	obtained := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, expiresAt := range map[string]time.Time{
		"expired":        obtained.Add(-time.Hour),
		"expiring now":   obtained,
		"unknown expiry": {},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := credential.Token{Value: secretValue, ExpiresAt: expiresAt}.RenewAt(obtained)
			g.Expect(got).To(BeTemporally("<=", obtained))
		})
	}
}

func TestMintRequestsATokenOfTheLifetimeBoundToTheSecret(t *testing.T) {
	expiry := metav1.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	bound := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "remote-credential", UID: "0b7c-uid"}}
	for name, tc := range map[string]struct {
		lifetime    time.Duration
		boundTo     *corev1.Secret
		wantSeconds int64
		wantBound   *authenticationv1.BoundObjectReference
	}{
		"a day, unbound": {lifetime: credential.Lifetime, wantSeconds: 86400},
		"the first credential, bound to its Secret": {
			lifetime: credential.FirstLifetime, boundTo: bound, wantSeconds: 600,
			wantBound: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: "remote-credential", UID: "0b7c-uid"},
		},
		"shorter than the API grants": {lifetime: time.Minute, wantSeconds: 600},
		"already past":                {lifetime: -time.Hour, wantSeconds: 600},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var asked *authenticationv1.TokenRequest
			c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
				SubResourceCreate: func(_ context.Context, _ client.Client, sub string, obj, subObj client.Object, _ ...client.SubResourceCreateOption) error {
					g.Expect(sub).To(Equal("token"))
					g.Expect(obj).To(BeAssignableToTypeOf(&corev1.ServiceAccount{}))
					g.Expect(client.ObjectKeyFromObject(obj)).To(Equal(client.ObjectKey{Namespace: "team-a", Name: "fleeet-remote-x"}))
					asked = subObj.(*authenticationv1.TokenRequest).DeepCopy()
					subObj.(*authenticationv1.TokenRequest).Status = authenticationv1.TokenRequestStatus{Token: secretValue, ExpirationTimestamp: expiry}
					return nil
				},
			}).Build()

			token, err := credential.Mint(context.Background(), c, "team-a", "fleeet-remote-x", tc.lifetime, tc.boundTo)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(token).To(Equal(credential.Token{Value: secretValue, ExpiresAt: expiry.Time}))
			g.Expect(asked).NotTo(BeNil())
			g.Expect(asked.Spec.ExpirationSeconds).To(HaveValue(Equal(tc.wantSeconds)))
			g.Expect(asked.Spec.BoundObjectRef).To(Equal(tc.wantBound))
			g.Expect(asked.Spec.Audiences).To(BeEmpty(), "the apiserver's own audience")
		})
	}
}

// An agent may shorten its tokens' lifetime down to what the API grants,
// but not past the longest the manager admits.
func TestCheckLifetimeAdmitsTenMinutesToADay(t *testing.T) {
	for lifetime, ok := range map[time.Duration]bool{
		credential.MinLifetime: true, time.Hour: true, credential.Lifetime: true,
		credential.MinLifetime - time.Second: false, 0: false, -time.Hour: false, credential.Lifetime + time.Second: false,
	} {
		err := credential.CheckLifetime(lifetime)
		if ok {
			NewWithT(t).Expect(err).NotTo(HaveOccurred(), "%s", lifetime)
			continue
		}
		NewWithT(t).Expect(err).To(MatchError(And(ContainSubstring(lifetime.String()), ContainSubstring("from 10m0s"), ContainSubstring("to 24h0m0s"))), "%s", lifetime)
	}
}

func TestMintReportsAFailedRequestNamingTheServiceAccount(t *testing.T) {
	g := NewWithT(t)
	boom := errors.New("serviceaccounts \"fleeet-remote-x\" is forbidden")
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		SubResourceCreate: func(context.Context, client.Client, string, client.Object, client.Object, ...client.SubResourceCreateOption) error {
			return boom
		},
	}).Build()

	token, err := credential.Mint(context.Background(), c, "team-a", "fleeet-remote-x", credential.Lifetime, nil)
	g.Expect(err).To(MatchError(boom), "the cause is wrapped, so callers can classify it")
	g.Expect(err.Error()).To(ContainSubstring("team-a/fleeet-remote-x"))
	g.Expect(token).To(BeZero())
}

// The values must match the fleet-agent chart's strict schema: token,
// management.url, management.caBundle (base64, left out when empty) and
// management.namespace, and nothing else.
func TestAgentValuesRenderTheChartsKeysAndRoundTrip(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	for name, tc := range map[string]struct {
		values credential.AgentValues
		want   map[string]any
	}{
		"with a CA bundle": {
			values: credential.AgentValues{Token: secretValue, Management: credential.Management{URL: "https://mgmt.example:6443", CABundle: ca, Namespace: "team-a"}},
			want: map[string]any{"token": secretValue, "management": map[string]any{
				"url": "https://mgmt.example:6443", "caBundle": base64.StdEncoding.EncodeToString(ca), "namespace": "team-a",
			}},
		},
		"trusting the system roots": {
			values: credential.AgentValues{Token: secretValue, Management: credential.Management{URL: "https://mgmt.example", Namespace: "team-b"}},
			want: map[string]any{"token": secretValue, "management": map[string]any{
				"url": "https://mgmt.example", "namespace": "team-b",
			}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			out, err := tc.values.YAML()
			g.Expect(err).NotTo(HaveOccurred())

			var rendered map[string]any
			g.Expect(yaml.Unmarshal(out, &rendered)).To(Succeed())
			g.Expect(rendered).To(Equal(tc.want))

			var back credential.AgentValues
			g.Expect(yaml.Unmarshal(out, &back)).To(Succeed())
			g.Expect(back).To(Equal(tc.values))
		})
	}
}
