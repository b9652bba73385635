package compiler

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// contentLag is how long the compiler takes a CompiledSync it created for
// one Remote's plan as there, for the next Remotes', while the cache has
// not seen it yet.
const contentLag = 5 * time.Second

// readsContent reports whether the Remote's plan may name CompiledSyncs: a
// push Remote's, which the manager resolves itself, and a pull Remote's
// whose agent says it resolves them.
func readsContent(r *fleeetv1.Remote) bool {
	return r.Spec.KubeconfigRef != nil || r.Status.ReadsCompiledSyncs
}

// contentReader reads CompiledSyncs from the cache, and from the apiserver
// those the cache has not seen yet.
func (c *Reconciler) contentReader() client.Reader {
	return plancontent.Lagging{Cache: c.Client, Live: c.apiReader}
}

// reconcileContent returns p, compiled from modules, as the Remote gets it.
// When the Remote reads CompiledSyncs (readsContent), each sync is stored
// in a CompiledSync, created when it does not exist, and the plan names it
// in the sync's place (plancontent.Entry). A sync stays whole in the plan when its Module
// has control-plane bindings, which compile it for each Remote: stored
// apart it would be one object per Remote, not one for all.
func (c *Reconciler) reconcileContent(ctx context.Context, remote *fleeetv1.Remote, modules []fleeetv1.Module, p plan) (plan, error) {
	if !readsContent(remote) {
		return p, nil
	}
	byName := make(map[string]*fleeetv1.Module, len(modules))
	for i := range modules {
		byName[modules[i].Name] = &modules[i]
	}
	wire := plan{parts: make([]fleeetv1.AssemblageSpec, len(p.parts)), compiled: p.compiled}
	for k, part := range p.parts {
		syncs := make([]fleeetv1.NamedSync, len(part.Syncs))
		for i := range part.Syncs {
			s := &part.Syncs[i]
			m := byName[s.Name]
			if m == nil || len(m.Spec.ControlPlaneBindings) > 0 {
				syncs[i] = *s
				continue
			}
			name := plancontent.Name(m, s)
			if err := c.storeContent(ctx, m, name, s); err != nil {
				return plan{}, err
			}
			syncs[i] = plancontent.Entry(s, name)
		}
		wire.parts[k] = part
		wire.parts[k].Syncs = syncs
	}
	return wire, nil
}

// storeContent makes sure the CompiledSync name holding s, compiled from m,
// exists and is not on its way out: one the collector marked unreferenced
// loses the mark, so the collector's delete, made on the version it
// marked, fails; one already gone is created again.
func (c *Reconciler) storeContent(ctx context.Context, m *fleeetv1.Module, name string, s *fleeetv1.NamedSync) error {
	cs := &fleeetv1.CompiledSync{}
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, cs, client.UnsafeDisableDeepCopy)
	switch {
	case err == nil:
		c.created.Delete(name) // the cache has it from now on
		if cs.Annotations[fleeetv1.UnreferencedAnnotation] != "" {
			err = plancontent.Mark(ctx, c.Client, cs.DeepCopy(), "")
		}
	case apierrors.IsNotFound(err):
		if created, ok := c.created.Load(name); ok && time.Since(created.(time.Time)) < contentLag {
			return nil
		}
		err = c.Client.Create(ctx, plancontent.New(m, name, s))
		if err == nil || apierrors.IsAlreadyExists(err) {
			c.created.Store(name, time.Now())
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("storing CompiledSync %s: %w", name, err)
	}
	return nil
}
