package compiler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
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

// reconcileContent returns p, compiled from modules against held (stored,
// each sync whole), as the Remote gets it (wire). When the Remote reads
// CompiledSyncs (readsContent), each sync is stored in a CompiledSync,
// created when it does not exist, and the plan names it in the sync's place
// (plancontent.Entry). A sync stays whole in the plan when its Module has
// control-plane bindings, which compile it for each Remote: stored apart it
// would be one object per Remote, not one for all.
//
// Content is judged by the admission policies once, when its CompiledSync
// is created. A Module whose content they refuse keeps what the Remote
// holds of it, as stored (an entry naming content, a whole sync, or
// nothing), and is told so in a PolicyDenied event: the plan is compiled
// again with those Modules held where they are (holding), and the other
// Modules' changes go on; before are the stamps stored holds. It returns
// the plan as finally compiled, its wire form, and the refusals.
func (c *Reconciler) reconcileContent(ctx context.Context, remote *fleeetv1.Remote, modules []fleeetv1.Module, stored, held fleeetv1.ProxyPlan,
	before map[string]fleeetv1.Compiled, p plan) (plan, plan, refusals, error) {
	if !readsContent(remote) {
		return p, p, nil, nil
	}
	wire, refused, err := c.storeContents(ctx, modules, stored, p, nil)
	if err != nil || len(refused) == 0 {
		return p, wire, nil, err
	}
	syncs := held.Syncs()
	for name, msg := range refused {
		if m := find(modules, name); m != nil {
			c.Recorder.Eventf(m, remote, corev1.EventTypeWarning, fleeetv1.ReasonPolicyDenied, "Compile",
				"Remote %s: compiled sync refused by admission policy: %s; the Remote %s, and the other Modules' changes go on",
				remote.Name, msg, keeps(syncs, name))
		}
	}
	if p, err = c.reconcileCompile(ctx, remote, holding(modules, refused), held, before); err != nil {
		return plan{}, plan{}, nil, err
	}
	wire, again, err := c.storeContents(ctx, modules, stored, p, refused)
	if err == nil && len(again) > 0 { // cannot be: holding changes no other sync
		err = again
	}
	return p, wire, refused, err
}

// storeContents stores the content of p's syncs (storeContent) and returns
// p with each entry naming it, and the Modules whose content admission
// refused, with the refusal. The entry of a Module in held, refused
// before, is the one stored holds: its content is not stored again.
func (c *Reconciler) storeContents(ctx context.Context, modules []fleeetv1.Module, stored fleeetv1.ProxyPlan, p plan,
	held refusals) (plan, refusals, error) {
	byName := make(map[string]*fleeetv1.Module, len(modules))
	for i := range modules {
		byName[modules[i].Name] = &modules[i]
	}
	var entries []fleeetv1.NamedSync
	if len(held) > 0 {
		for _, pa := range stored {
			if pa == nil {
				continue
			}
			own, err := plancontent.Entries(ctx, pa, plancontent.From(c.contentReader(), pa.Namespace))
			if err != nil {
				return plan{}, nil, err
			}
			entries = append(entries, own...)
		}
	}
	refused := refusals{}
	wire := plan{parts: make([]fleeetv1.AssemblageSpec, len(p.parts)), own: p.own, compiled: p.compiled, stamps: p.stamps}
	for k, part := range p.parts {
		syncs := make([]fleeetv1.NamedSync, len(part.Syncs))
		for i := range part.Syncs {
			s := &part.Syncs[i]
			m := byName[s.Name]
			if _, ok := held[s.Name]; ok {
				if entry := compile.Find(entries, s.Name); entry != nil {
					syncs[i] = *entry
					continue
				}
			}
			if m == nil || len(m.Spec.ControlPlaneBindings) > 0 {
				syncs[i] = *s
				continue
			}
			name := plancontent.Name(m, s)
			err := c.storeContent(ctx, m, name, s)
			if msg, denied := policyDenial(err); denied {
				refused[s.Name] = msg
				continue
			}
			if err != nil {
				return plan{}, nil, err
			}
			syncs[i] = plancontent.Entry(s, name)
		}
		wire.parts[k] = part
		wire.parts[k].Syncs = syncs
	}
	return wire, refused, nil
}

// refusals are the Modules whose content admission policy refused for one
// Remote, each with the policy's message.
type refusals map[string]string

// Error names the Modules refused and why, for the compiler's log.
func (r refusals) Error() string {
	var msgs []string
	for _, name := range slices.Sorted(maps.Keys(r)) {
		msgs = append(msgs, fmt.Sprintf("Module %s: %s", name, r[name]))
	}
	return "admission policy refused compiled syncs, whose Modules keep what the Remote holds: " + strings.Join(msgs, "; ")
}

// holding returns modules with those refused suspended, so that compiling
// keeps what the Remote holds of them where it is (compile.Plan holds a
// suspended Module's sync), placed and measured with the rest of the plan.
// modules are only read: a Module held is a copy.
func holding(modules []fleeetv1.Module, refused refusals) []fleeetv1.Module {
	out := slices.Clone(modules)
	for i := range out {
		if _, ok := refused[out[i].Name]; ok {
			m := out[i].DeepCopy()
			m.Spec.Suspend = true
			out[i] = *m
		}
	}
	return out
}

// find returns the Module of modules named name, or nil.
func find(modules []fleeetv1.Module, name string) *fleeetv1.Module {
	for i := range modules {
		if modules[i].Name == name {
			return &modules[i]
		}
	}
	return nil
}

// storeContent makes sure the CompiledSync name holding s, compiled from
// m, exists and is not on its way out (store).
func (c *Reconciler) storeContent(ctx context.Context, m *fleeetv1.Module, name string, s *fleeetv1.NamedSync) error {
	return c.store(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, &fleeetv1.CompiledSync{},
		func() client.Object { return plancontent.New(m, name, s) })
}

// store makes sure the object key, a CompiledSync or CompiledPlan read into
// have (a new object of its kind) and built by build when missing, exists
// and is not on its way out: one the collector marked unreferenced loses
// the mark, so the collector's delete, made on the version it marked,
// fails; one already gone is created again, once however many workers
// find it missing together. A create admission policy
// refused is taken as refused for contentLag, so that the Remotes compiled
// next do not ask the webhook to judge the same content again.
func (c *Reconciler) store(ctx context.Context, key client.ObjectKey, have client.Object, build func() client.Object) error {
	name := key.Name
	err := c.Client.Get(ctx, key, have, client.UnsafeDisableDeepCopy)
	switch {
	case err == nil:
		c.created.Delete(name) // the cache has it from now on
		c.refused.Delete(name)
		if have.GetAnnotations()[fleeetv1.UnreferencedAnnotation] != "" {
			err = plancontent.Mark(ctx, c.Client, have.DeepCopyObject().(client.Object), "")
		}
	case apierrors.IsNotFound(err):
		if created, ok := c.created.Load(name); ok && time.Since(created.(time.Time)) < contentLag {
			return nil
		}
		if r, ok := c.refused.Load(name); ok && time.Since(r.(refusedAt).at) < contentLag {
			return fmt.Errorf("storing %s %s: %w", kindOf(have), name, r.(refusedAt).refusal)
		}
		_, err, _ = c.creating.Do(key.String(), func() (any, error) {
			err := c.Client.Create(ctx, build())
			if err == nil || apierrors.IsAlreadyExists(err) {
				c.created.Store(name, time.Now())
				return nil, nil
			}
			if msg, denied := policyDenial(err); denied {
				c.refused.Store(name, refusedAt{refusal: &refusal{message: msg}, at: time.Now()})
			}
			return nil, err
		})
	}
	if err != nil {
		return fmt.Errorf("storing %s %s: %w", kindOf(have), name, err)
	}
	return nil
}

// kindOf names the kind of o, a CompiledSync or CompiledPlan, for errors.
func kindOf(o client.Object) string {
	if _, ok := o.(*fleeetv1.CompiledPlan); ok {
		return "CompiledPlan"
	}
	return "CompiledSync"
}

// refusedAt is a CompiledSync's refused create and when it was refused.
type refusedAt struct {
	refusal *refusal
	at      time.Time
}
