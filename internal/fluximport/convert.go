package fluximport

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/readyexpr"
)

const (
	sourceGroup    = "source.toolkit.fluxcd.io"
	kustomizeGroup = "kustomize.toolkit.fluxcd.io"
	helmGroup      = "helm.toolkit.fluxcd.io"
)

// importer converts one checkout.
type importer struct {
	opts Options
	// sources are the checkout's GitRepositories, HelmRepositories and
	// OCIRepositories by key.
	sources map[string]*object
	// usedBy lists, by source key, the Modules a source went into.
	usedBy map[string][]string
	// secrets lists, by Secret name, the Modules that deliver it.
	secrets map[string][]string
}

// conversion collects what converting one object rewrote, what stops it,
// the Secrets its Module delivers and the keys of the sources it uses.
type conversion struct {
	rewrites, refusals, secrets, sources []string
}

func (c *conversion) rewrite(format string, a ...any) {
	c.rewrites = append(c.rewrites, fmt.Sprintf(format, a...))
}
func (c *conversion) refuse(format string, a ...any) {
	c.refusals = append(c.refusals, fmt.Sprintf(format, a...))
}

// deliver names a Secret of the Flux object's namespace that the Module
// now delivers from the tenant namespace, or nothing for ref nil.
func (c *conversion) deliver(ref *fleeetv1.LocalObjectReference) *fleeetv1.LocalObjectReference {
	if ref != nil && !slices.Contains(c.secrets, ref.Name) {
		c.secrets = append(c.secrets, ref.Name)
	}
	return ref
}

// verdict says what the import does with one field of a Flux object: the
// zero value converts it, drop leaves it out as a rewrite, refuse leaves
// the whole object out. Both give the reason.
type verdict struct{ drop, refuse string }

// fields is a table of verdicts: handled (space-separated) are converted,
// the others' as they say.
func fields(handled string, others ...map[string]verdict) map[string]verdict {
	t := map[string]verdict{}
	for _, o := range others {
		maps.Copy(t, o)
	}
	for _, f := range strings.Fields(handled) {
		t[f] = verdict{}
	}
	return t
}

// same gives each of names (space-separated) the verdict v.
func same(v verdict, names string) map[string]verdict {
	t := map[string]verdict{}
	for _, f := range strings.Fields(names) {
		t[f] = v
	}
	return t
}

// check judges every field of raw, a JSON object at path, by table; a
// field the table does not know stops the conversion, since what it means
// would be lost.
func (c *conversion) check(path string, raw json.RawMessage, table map[string]verdict) {
	var present map[string]json.RawMessage
	if json.Unmarshal(raw, &present) != nil {
		return // not an object: decoding the spec says so
	}
	for _, f := range slices.Sorted(maps.Keys(present)) {
		switch v, known := table[f]; {
		case !known:
			c.refuse("%s.%s: not a field the import knows", path, f)
		case v.refuse != "":
			c.refuse("%s.%s: %s", path, f, v.refuse)
		case v.drop != "":
			c.rewrite("%s.%s left out: %s", path, f, v.drop)
		}
	}
}

// Reasons shared by the tables.
const (
	whyServiceAccount = "fleeet applies every sync as the tenant's ServiceAccount"
	whyKubeConfig     = "fleeet reaches a cluster through its Remote, not a kubeconfig"
	whyNoField        = "the Module API has no such field"
	whySourceAuth     = "the Module's source authenticates with secretRef only"
)

// sourceRef is a Flux cross-object reference to a source.
type sourceRef struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// dependency is an entry of a Flux object's dependsOn.
type dependency struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	ReadyExpr string `json:"readyExpr"`
}

// run converts the objects: the Kustomizations and HelmReleases into
// Modules, reporting on every object.
func (i *importer) run(ctx context.Context, objects []*object) ([]fleeetv1.Module, *Report) {
	for _, o := range objects {
		if o.group() == sourceGroup || o.isGitRepo() {
			i.sources[o.key()] = o
		}
	}
	rep := &Report{Namespace: i.opts.Namespace, Selector: selectorString(i.opts.Selector)}
	var modules []fleeetv1.Module
	from := map[string]*object{} // Module name → the object it came from
	reported := map[string]int{} // Module name → its object's report
	for _, o := range objects {
		var spec *fleeetv1.ModuleSpec
		c := &conversion{}
		switch {
		case o.group() == kustomizeGroup && o.Kind == "Kustomization":
			spec = i.kustomization(ctx, o, c)
		case o.group() == helmGroup && o.Kind == "HelmRelease":
			spec = i.helmRelease(ctx, o, c)
		case o.bundle != nil:
			spec = i.fleetBundle(ctx, o, c)
		case o.group() == sourceGroup || o.isGitRepo():
			continue // reported once every sync is converted
		default:
			rep.Objects = append(rep.Objects, o.report(NotConverted, "",
				[]string{fmt.Sprintf("%s %s is not a Flux object the import converts", o.APIVersion, o.Kind)}))
			rep.Counts.OtherKinds++
			continue
		}
		if errs := validation.IsDNS1123Label(o.Metadata.Name); len(errs) > 0 {
			c.refuse("metadata.name %s: a Module's name names its sync downstream, a DNS label: %s", o.Metadata.Name, strings.Join(errs, "; "))
		}
		if first, dup := from[o.Metadata.Name]; dup {
			c.refuse("metadata.name: Module %s is already imported from %s %s", o.Metadata.Name, first.Kind, qualified(first.Metadata.Namespace, first.Metadata.Name))
		}
		if len(c.refusals) > 0 {
			rep.Objects = append(rep.Objects, o.report(NotConverted, "", c.refusals))
			continue
		}
		m := i.module(o, spec, c)
		from[m.Name], reported[m.Name] = o, len(rep.Objects)
		modules = append(modules, m)
		outcome := Converted
		if len(c.rewrites) > 0 {
			outcome = Rewritten
		}
		rep.Objects = append(rep.Objects, o.report(outcome, m.Name, c.rewrites))
	}
	i.reportSources(rep, objects)
	reportDependencies(rep, modules, reported)
	for name, users := range i.secrets {
		rep.Secrets = append(rep.Secrets, SecretUse{Name: name, Modules: users})
	}
	rep.count(len(modules))
	return modules, rep
}

// module makes the Module of o, delivering the Secrets its sync names.
func (i *importer) module(o *object, spec *fleeetv1.ModuleSpec, c *conversion) fleeetv1.Module {
	if spec.Selector == nil { // a Fleet bundle's comes from its GitRepo
		spec.Selector = i.opts.Selector.DeepCopy()
	}
	for _, s := range c.secrets {
		spec.Sync.Secrets = append(spec.Sync.Secrets, fleeetv1.SecretDelivery{Name: s})
		i.secrets[s] = append(i.secrets[s], o.Metadata.Name)
	}
	for _, key := range c.sources {
		i.usedBy[key] = append(i.usedBy[key], o.Metadata.Name)
	}
	return fleeetv1.Module{
		TypeMeta:   metav1.TypeMeta{APIVersion: fleeetv1.GroupVersion.String(), Kind: "Module"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Metadata.Name, Namespace: i.opts.Namespace},
		Spec:       *spec,
	}
}

// reportSources reports each source: converted into the Modules that use
// it, or into none.
func (i *importer) reportSources(rep *Report, objects []*object) {
	for _, o := range objects {
		if i.sources[o.key()] != o {
			continue
		}
		switch users := i.usedBy[o.key()]; {
		case o.isGitRepo() && len(users) == 0:
			rep.Objects = append(rep.Objects, o.report(NotConverted, "", []string{"no bundle of its paths is converted"}))
		case !o.isGitRepo() && !slices.Contains([]string{"GitRepository", "HelmRepository", "OCIRepository"}, o.Kind):
			rep.Objects = append(rep.Objects, o.report(NotConverted, "", []string{"the Module API has no " + o.Kind + " source"}))
		case len(users) == 0:
			rep.Objects = append(rep.Objects, o.report(NotConverted, "", []string{"no converted Kustomization or HelmRelease uses it"}))
		default:
			rep.Objects = append(rep.Objects, o.report(Converted, strings.Join(users, ", "), nil))
		}
	}
}

// reportDependencies notes, on each Module's object, a dependency on a
// name no Module of the import has: it must come from elsewhere.
func reportDependencies(rep *Report, modules []fleeetv1.Module, reported map[string]int) {
	for _, m := range modules {
		for _, d := range m.Spec.Sync.DependsOn {
			if _, imported := reported[d.Name]; !imported {
				o := &rep.Objects[reported[m.Name]]
				o.Outcome = Rewritten
				o.Notes = append(o.Notes, fmt.Sprintf("spec.dependsOn %s: no Module of that name is imported; the Module waits until one exists", d.Name))
			}
		}
	}
}

// dependsOn converts Flux's dependsOn to dependencies by name: Modules
// depend on each other within the tenant namespace. A readyExpr is kept
// when it compiles as the agent compiles it, which declares dep only.
func dependsOn(o *object, deps []dependency, c *conversion) []fleeetv1.Dependency {
	var out []fleeetv1.Dependency
	for _, d := range deps {
		if d.Namespace != "" && d.Namespace != o.Metadata.Namespace {
			c.rewrite("spec.dependsOn %s/%s: depends on Module %s of the same tenant namespace", d.Namespace, d.Name, d.Name)
		}
		if d.ReadyExpr != "" {
			if _, err := readyexpr.Compile(d.ReadyExpr); err != nil {
				c.refuse("spec.dependsOn %s readyExpr: fleeet declares dep only, not Flux's self: %v", d.Name, err)
			}
		}
		out = append(out, fleeetv1.Dependency{Name: d.Name, ReadyExpr: d.ReadyExpr})
	}
	return out
}

// atLeast returns d, raised to least (and noted) when shorter: a Module's
// intervals have a floor that Flux's have not.
func atLeast(field string, d *metav1.Duration, least time.Duration, c *conversion) *metav1.Duration {
	if d == nil || d.Duration >= least {
		return d
	}
	c.rewrite("%s %s raised to %s, the least a Module takes", field, d.Duration, least)
	return &metav1.Duration{Duration: least}
}

// selectorString writes a selector as kubectl takes it; {} selects all.
func selectorString(s *metav1.LabelSelector) string {
	if str := metav1.FormatLabelSelector(s); str != "" && str != "<none>" {
		return str
	}
	if s == nil {
		return "nothing (no selector)"
	}
	return "{} (every Remote)"
}
