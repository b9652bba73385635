package adversarial_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// sharedPlanAttacks go after the CompiledPlans plan parts name
// (ProxyAssemblageSpec.CompiledPlan): a tenant who could write one would
// change what every cluster naming it deploys, one who could delete one
// would leave those clusters unable to read their plans, and a cluster that
// could list them would learn the names of content its plan does not name.
// The CompiledPlan attacked is written the way the manager writes it, with
// the manager's own token.
func sharedPlanAttacks(ctx context.Context, f *fleet, alice, cluster, manager client.Client, aliceID, clusterID string) []attack {
	admin := f.mgmt.Client
	// written is a CompiledPlan naming the CompiledSync content, as the
	// manager stores it, created unless it is there.
	written := func(g Gomega, content string) *fleeetv1.CompiledPlan {
		cp := plancontent.NewPlan(tenantA, []fleeetv1.NamedSync{{Name: "app", Content: content}},
			map[string]fleeetv1.Compiled{"app": {Generation: 1, Revision: "v1.0.0"}})
		g.Expect(client.IgnoreAlreadyExists(manager.Create(ctx, cp.DeepCopy()))).To(Succeed())
		return cp
	}
	intact := func(g Gomega, cp *fleeetv1.CompiledPlan) {
		stored := &fleeetv1.CompiledPlan{}
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(cp), stored)).To(Succeed())
		g.Expect(stored.Spec).To(Equal(cp.Spec))
	}
	return []attack{
		{"tenant-creates-a-shared-plan", aliceID, "create a CompiledPlan in team-a naming content of its choice", func(t *testing.T, g Gomega) string {
			cp := plancontent.NewPlan(tenantA, []fleeetv1.NamedSync{{Name: "app", Content: "forged-0123456789abcdef0123"}}, nil)
			return refused(g, alice.Create(ctx, cp), "compiled by the fleet manager only")
		}},
		{"tenant-patches-a-shared-plan", aliceID, "merge-patch a CompiledPlan the manager wrote to name other content", func(t *testing.T, g Gomega) string {
			cp := written(g, "app-patched00000000000000")
			msg := refused(g, testenv.Change(ctx, alice, cp.DeepCopy(), func(cp *fleeetv1.CompiledPlan) {
				cp.Spec.Entries[0].Content = "forged-0123456789abcdef0123"
			}), "compiled by the fleet manager only", "is immutable")
			intact(g, cp)
			return msg
		}},
		{"tenant-deletes-a-shared-plan", aliceID, "delete a CompiledPlan the manager wrote (every plan naming it would break)", func(t *testing.T, g Gomega) string {
			cp := written(g, "app-deleted00000000000000")
			msg := refused(g, alice.Delete(ctx, cp.DeepCopy()), "deleted by the fleet manager only")
			intact(g, cp)
			return msg
		}},
		{"cluster-lists-shared-plans", clusterID, "list CompiledPlans in team-a, to learn content names its plan does not name", func(t *testing.T, g Gomega) string {
			written(g, "app-listed000000000000000")
			return refusedByRBAC(g, cluster.List(ctx, &fleeetv1.CompiledPlanList{}, client.InNamespace(tenantA)))
		}},
		{"cluster-creates-a-shared-plan", clusterID, "create a CompiledPlan in team-a", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.Create(ctx, plancontent.NewPlan(tenantA, []fleeetv1.NamedSync{{Name: "app", Content: "planted"}}, nil)))
		}},
		{"cluster-reads-another-tenants-shared-plan", clusterID, "get a CompiledPlan in team-b", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.Get(ctx, client.ObjectKey{Namespace: tenantB, Name: "plan-0123456789abcdef0123"}, &fleeetv1.CompiledPlan{}))
		}},
		{"cluster-guesses-a-shared-plan-name", clusterID, "get the CompiledPlan a plan would name for content whose name it guessed without the Module's UID", func(t *testing.T, g Gomega) string {
			cp := written(g, "app-known0000000000000000")
			g.Expect(cluster.Get(ctx, client.ObjectKeyFromObject(cp), &fleeetv1.CompiledPlan{})).To(Succeed(),
				"a cluster gets a CompiledPlan by its name; only the name is hidden")
			guess := plancontent.NewPlan(tenantA, []fleeetv1.NamedSync{{Name: "app", Content: "app-guessed00000000000000"}}, cp.Spec.Compiled)
			err := cluster.Get(ctx, client.ObjectKeyFromObject(guess), &fleeetv1.CompiledPlan{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "guessing %s: %v", guess.Name, err)
			return fmt.Sprintf("%s: %v (the name hashes the CompiledSync names it holds, themselves keyed)", guess.Name, err)
		}},
	}
}
