package manager_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

// benchRotation delivers one Secret to agents pull clusters, rotates it on
// the management cluster and reports how long the new value took to reach
// each cluster's namespace downstream: the manager rewrites every bundle
// holding it, each cluster's watch brings its bundle, and the agent writes
// the Secret.
func benchRotation(b *testing.B, managerBin, agentBin string, agents int) {
	ctx := b.Context()
	mgmt, down, ns := pullFleet(b, managerBin, agentBin, agents, true)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds", Labels: map[string]string{fleeetv1.DeliverableLabel: "true"}},
		Data: map[string][]byte{"password": []byte("v1")}}
	if err := mgmt.Client.Create(ctx, creds); err != nil {
		b.Fatal(err)
	}
	m := fleettest.NewModule("v1.0.0", &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "all"}})
	m.Namespace = ns
	m.Spec.Sync.Secrets = []fleeetv1.SecretDelivery{{Name: "creds"}}
	if err := mgmt.Client.Create(ctx, m); err != nil {
		b.Fatal(err)
	}
	watchDelivered(b, down, agents, "v1")

	if err := mgmt.Client.Get(ctx, client.ObjectKeyFromObject(creds), creds); err != nil {
		b.Fatal(err)
	}
	creds.Data["password"] = []byte("v2")
	start := time.Now()
	if err := mgmt.Client.Update(ctx, creds); err != nil {
		b.Fatal(err)
	}
	reportLatencies(b, start, watchDelivered(b, down, agents, "v2"))
}

// watchDelivered watches the delivered Secrets downstream until n
// namespaces hold creds with password and returns when each first did.
func watchDelivered(b *testing.B, c *testenv.Cluster, n int, password string) map[string]time.Time {
	at := map[string]time.Time{}
	testenv.WatchUntil(b, c, &corev1.SecretList{}, "", 10*time.Minute, fmt.Sprintf("%d delivered Secrets", n), func(ev watch.Event) bool {
		s, ok := ev.Object.(*corev1.Secret)
		if !ok || ev.Type == watch.Deleted || s.Name != "creds" || s.Labels[fleeetv1.DeliveredLabel] != "true" || string(s.Data["password"]) != password {
			return false
		}
		if _, seen := at[s.Namespace]; !seen {
			at[s.Namespace] = time.Now()
		}
		return len(at) == n
	})
	return at
}
