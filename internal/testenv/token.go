package testenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
)

// IssueToken creates tok in c, as a platform engineer does, and returns the
// fleet-agent chart values the manager writes into the token's Secret.
// managerLog returns the end of the running manager's log, which explains
// a wait that times out.
func IssueToken(t TB, c *Cluster, tok *fleeetv1.RegistrationToken, managerLog func() string) map[string]any {
	t.Helper()
	ctx := t.Context()
	if err := c.Client.Create(ctx, tok); err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if last = c.Client.Get(ctx, client.ObjectKeyFromObject(tok), tok); last != nil {
			return false, nil
		}
		if tok.Status.SecretName == "" {
			last = fmt.Errorf("RegistrationToken %s/%s names no Secret yet", tok.Namespace, tok.Name)
			return false, nil
		}
		secret := &corev1.Secret{}
		if last = c.Client.Get(ctx, client.ObjectKey{Namespace: tok.Namespace, Name: tok.Status.SecretName}, secret); last != nil {
			return false, nil
		}
		last = yaml.Unmarshal(secret.Data[credential.ValuesKey], &values)
		return last == nil && values["token"] != nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for the agent values of RegistrationToken %s/%s: %v (last: %v)\nmanager log:\n%s",
			tok.Namespace, tok.Name, err, last, managerLog())
	}
	return values
}

// EnrolmentOf returns the enrolment string of a RegistrationToken
// IssueToken saw issued, as `fleetctl token create` prints it.
func EnrolmentOf(t TB, c *Cluster, tok *fleeetv1.RegistrationToken) string {
	t.Helper()
	secret := &corev1.Secret{}
	if err := c.Client.Get(t.Context(), client.ObjectKey{Namespace: tok.Namespace, Name: tok.Status.SecretName}, secret); err != nil {
		t.Fatal(err)
	}
	enrolment := string(secret.Data[credential.EnrolmentKey])
	if enrolment == "" {
		t.Fatalf("Secret %s/%s has no %q key", secret.Namespace, secret.Name, credential.EnrolmentKey)
	}
	return enrolment
}
