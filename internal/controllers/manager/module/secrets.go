package module

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/delivery"
)

// deliveredSecretsIndex indexes Modules by the Secrets their syncs deliver,
// so a Secret's change, its label above all, is judged again at once.
const deliveredSecretsIndex = "spec.sync.secrets.name"

func indexDeliveredSecrets(o client.Object) []string {
	var names []string
	for _, s := range o.(*fleeetv1.Module).Spec.Sync.Secrets {
		names = append(names, s.Name)
	}
	return names
}

// undeliverable says, for each Secret the Module's sync delivers that is
// missing or may not be delivered (delivery.Check), why; remotes are the
// namespace's, whose kubeconfig Secrets are never delivered. Secrets are
// read from the cache (delivery.Read), which holds whole only those
// offered, and the metadata of the others. The messages name Secrets only.
func (r *Reconciler) undeliverable(ctx context.Context, m *fleeetv1.Module, remotes []*fleeetv1.Remote) ([]string, error) {
	if len(m.Spec.Sync.Secrets) == 0 {
		return nil, nil
	}
	kubeconfigs := map[string]bool{}
	for i := range remotes {
		if ref := remotes[i].Spec.KubeconfigRef; ref != nil {
			kubeconfigs[ref.Name] = true
		}
	}
	var why []string
	for _, s := range m.Spec.Sync.Secrets {
		secret, err := delivery.Read(ctx, r.Client, client.ObjectKey{Namespace: m.Namespace, Name: s.Name})
		switch {
		case apierrors.IsNotFound(err):
			why = append(why, "Secret "+s.Name+" does not exist")
		case err != nil:
			return nil, err
		default:
			if err := delivery.Check(secret, kubeconfigs); err != nil {
				why = append(why, err.Error())
			}
		}
	}
	return why, nil
}
