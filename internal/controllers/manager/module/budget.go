package module

import (
	"context"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// budget keeps how many Remotes each Module's rollout has moving, so that
// rollouts sharing a namespace's cap (annotation fleeet.dev/max-moving) or
// the manager's (--max-moving) stay within it together. Rollout steps that
// take from a cap run one at a time, under mu. A Module not stepped since
// the manager started counts what its status last said.
type budget struct {
	mu     sync.Mutex
	moving map[types.NamespacedName]int
}

// limits works out what m's rollout may have moving, given what the other
// Modules under the same caps have moving, with the budget locked. An
// unusable namespace annotation is returned as warning and ignored.
func (b *budget) limits(ctx context.Context, c client.Client, m *fleeetv1.Module, managerCap int) (lim limits, warning string, err error) {
	lim.budget = -1
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: m.Namespace}, ns); err != nil {
		return lim, "", err
	}
	nsCap := 0
	if v, ok := ns.Annotations[fleeetv1.MaxMovingAnnotation]; ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			nsCap = n
		} else {
			warning = "namespace " + m.Namespace + ": annotation " + fleeetv1.MaxMovingAnnotation + ": " + strconv.Quote(v) +
				" is not a positive integer; no namespace budget applies"
		}
	}
	if nsCap == 0 && managerCap == 0 {
		return lim, warning, nil
	}
	modules := &fleeetv1.ModuleList{}
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if managerCap == 0 {
		opts = append(opts, client.InNamespace(m.Namespace))
	}
	if err := c.List(ctx, modules, opts...); err != nil {
		return lim, warning, err
	}
	self := client.ObjectKeyFromObject(m)
	nsOthers, allOthers := 0, 0
	for i := range modules.Items {
		o := &modules.Items[i]
		key := client.ObjectKeyFromObject(o)
		if key == self {
			continue
		}
		n, ok := b.moving[key]
		if !ok && o.Status.Rollout != nil {
			n = int(o.Status.Rollout.Moving)
		}
		allOthers += n
		if o.Namespace == m.Namespace {
			nsOthers += n
		}
	}
	if nsCap > 0 {
		lim.budget, lim.budgetCap, lim.budgetOf = max(0, nsCap-nsOthers), nsCap, "the namespace's"
	}
	if managerCap > 0 && (lim.budget < 0 || managerCap-allOthers < lim.budget) {
		lim.budget, lim.budgetCap, lim.budgetOf = max(0, managerCap-allOthers), managerCap, "the manager's"
	}
	return lim, warning, nil
}

// record notes what a Module's rollout has moving after a step; forget
// drops a deleted Module.
func (b *budget) record(key types.NamespacedName, moving int) {
	if b.moving == nil {
		b.moving = map[types.NamespacedName]int{}
	}
	b.moving[key] = moving
}

func (b *budget) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.moving, key)
}
