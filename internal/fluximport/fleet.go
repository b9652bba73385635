package fluximport

// Rancher Fleet input: the GitRepos of fleet.cattle.io and the bundles
// their paths hold, each a directory with a fleet.yaml or of plain
// manifests. A bundle becomes a Module as a Kustomization or HelmRelease
// does, and is reported as one with the kind Bundle.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

const (
	fleetGroup = "fleet.cattle.io"
	fleetFile  = "fleet.yaml"
	// bundleKind names a Fleet bundle in the report.
	bundleKind = "Bundle"
)

// bundle is one Fleet bundle of the checkout.
type bundle struct {
	// dir is the bundle's directory, slash-separated and relative to the
	// checkout, which is taken for the root of the GitRepo's repository.
	dir string
	// gitRepo is the GitRepo whose paths hold it; nil for a fleet.yaml no
	// GitRepo of the checkout names.
	gitRepo *object
	// fleet says a fleet.yaml describes it; without, its manifests are
	// applied as they are.
	fleet, chart, manifests bool
	// root is the checkout, where valuesFiles are read.
	root string
	// unread is why the fleet.yaml cannot be read, if it cannot.
	unread error
}

func (o *object) isGitRepo() bool { return o.group() == fleetGroup && o.Kind == "GitRepo" }

// bundles finds the Fleet bundles: under each path of each GitRepo every
// directory with a fleet.yaml, or the path itself when it holds none but
// has manifests; then the fleet.yaml directories no GitRepo names.
func (chk *checkout) bundles() []*object {
	dirs := slices.Sorted(maps.Keys(chk.fleetFiles))
	claimed := map[string]bool{}
	var out []*object
	for _, r := range chk.objects {
		if !r.isGitRepo() {
			continue
		}
		var spec struct {
			Paths []string `json:"paths"`
		}
		_ = json.Unmarshal(r.Spec, &spec) // a spec that does not decode is reported on its bundles
		if len(spec.Paths) == 0 {
			spec.Paths = []string{"/"} // Fleet's default: the repository's root
		}
		for _, p := range chk.expand(spec.Paths) {
			found := false
			for _, d := range dirs {
				if under(d, p) {
					out, claimed[d], found = append(out, chk.bundle(r, d)), true, true
				}
			}
			if !found {
				out = append(out, chk.bundle(r, p))
			}
		}
	}
	for _, d := range dirs {
		if !claimed[d] {
			out = append(out, chk.bundle(nil, d))
		}
	}
	return out
}

// expand cleans a GitRepo's paths and replaces each glob, as Fleet reads
// them (some/*/path), by the directories of the checkout it matches, in
// order; a glob that matches none stays, to be reported as a path that
// holds nothing.
func (chk *checkout) expand(paths []string) []string {
	var dirs []string
	for _, set := range []map[string]bool{chk.manifests, chk.charts} {
		for d := range set {
			dirs = append(dirs, d)
		}
	}
	for d := range chk.fleetFiles {
		dirs = append(dirs, d)
	}
	all := map[string]bool{}
	for _, d := range dirs {
		for ; d != "." && d != "/" && !all[d]; d = path.Dir(d) {
			all[d] = true
		}
	}
	var out []string
	for _, p := range paths {
		p = path.Clean(strings.Trim(p, "/"))
		if !strings.ContainsAny(p, "*?[") {
			out = append(out, p)
			continue
		}
		var matched []string
		for d := range all {
			if ok, _ := path.Match(p, d); ok {
				matched = append(matched, d)
			}
		}
		if len(matched) == 0 {
			matched = []string{p}
		}
		slices.Sort(matched)
		out = append(out, matched...)
	}
	return out
}

// under says whether dir is p or below it.
func under(dir, p string) bool {
	return p == "." || dir == p || strings.HasPrefix(dir, p+"/")
}

// bundle makes the object reporting a bundle: named as Fleet names it, the
// GitRepo's name and the path joined by a dash, unless fleet.yaml names it.
func (chk *checkout) bundle(repo *object, dir string) *object {
	b := &bundle{dir: dir, gitRepo: repo, chart: chk.charts[dir], root: chk.root}
	o := &object{APIVersion: fleetGroup + "/v1alpha1", Kind: bundleKind, file: dir + "/", bundle: b}
	for d := range chk.manifests {
		b.manifests = b.manifests || under(d, dir)
	}
	name := dir
	if repo != nil {
		o.Metadata.Namespace = repo.Metadata.Namespace
		name = repo.Metadata.Name + "/" + dir
		if dir == "." {
			name = repo.Metadata.Name
		}
	}
	if raw, ok := chk.fleetFiles[dir]; ok {
		b.fleet, o.file = true, path.Join(dir, fleetFile)
		var named struct {
			Name string `json:"name"`
		}
		if o.Spec, b.unread = yaml.YAMLToJSON(raw); b.unread == nil {
			_ = json.Unmarshal(o.Spec, &named) // not an object: reported on conversion
			name = cmp.Or(named.Name, name)
		}
	}
	o.Metadata.Name = bundleName(name)
	return o
}

// bundleName writes a bundle's name as a DNS label, as Fleet does.
func bundleName(name string) string {
	return strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(name)), "-")
}

// gitRepoSpec holds the fields of a GitRepo's spec a Module says.
type gitRepoSpec struct {
	Repo             string `json:"repo"`
	Branch           string `json:"branch"`
	Revision         string `json:"revision"`
	ClientSecretName string `json:"clientSecretName"`
	HelmSecretName   string `json:"helmSecretName"`
	TargetNamespace  string `json:"targetNamespace"`
	Paused           bool   `json:"paused"`
	Targets          []struct {
		ClusterSelector *metav1.LabelSelector `json:"clusterSelector"`
	} `json:"targets"`
}

// fleetYAML holds the fields of a fleet.yaml a Module says.
type fleetYAML struct {
	DefaultNamespace string `json:"defaultNamespace"`
	Namespace        string `json:"namespace"`
	Paused           bool   `json:"paused"`
	Kustomize        *struct {
		Dir string `json:"dir"`
	} `json:"kustomize"`
	Helm *struct {
		Chart          string         `json:"chart"`
		Repo           string         `json:"repo"`
		Version        string         `json:"version"`
		ReleaseName    string         `json:"releaseName"`
		Values         map[string]any `json:"values"`
		ValuesFiles    []string       `json:"valuesFiles"`
		TimeoutSeconds int            `json:"timeoutSeconds"`
		ValuesFrom     []struct {
			ConfigMapKeyRef *keyRef `json:"configMapKeyRef"`
			SecretKeyRef    *keyRef `json:"secretKeyRef"`
		} `json:"valuesFrom"`
	} `json:"helm"`
	TargetCustomizations []json.RawMessage `json:"targetCustomizations"`
	DependsOn            []struct {
		Name     string          `json:"name"`
		Selector json.RawMessage `json:"selector"`
	} `json:"dependsOn"`
}

// keyRef is a key of a ConfigMap or Secret holding Helm values.
type keyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// customization is a targetCustomizations entry an override says.
type customization struct {
	Name            string                `json:"name"`
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector"`
	Helm            *struct {
		Values *apiextensionsv1.JSON `json:"values"`
	} `json:"helm"`
	Kustomize *struct {
		Dir string `json:"dir"`
	} `json:"kustomize"`
}

// Reasons the Fleet tables share.
const (
	whyClusterGroup = "fleeet has no cluster groups; a Module selects Remotes by their labels"
	whyClusterName  = "a Module selects Remotes by their labels, not by name"
	whyNoWrites     = "fleeet does not write to git"
)

var (
	gitRepoFields = fields("repo branch revision paths targets clientSecretName helmSecretName targetNamespace paused pollingInterval",
		same(verdict{drop: whyNoField}, "forceSyncGeneration keepResources deleteNamespace correctDrift"),
		same(verdict{drop: whyNoWrites}, "imageScanInterval imageScanCommit"),
		same(verdict{drop: "a Module is pinned to one version"}, "webhookSecret disablePolling"),
		same(verdict{refuse: whyNoField}, "insecureSkipTLSVerify caBundle helmSecretNameForPaths ociRegistry"),
		map[string]verdict{
			"serviceAccount":   {drop: whyServiceAccount},
			"helmRepoURLRegex": {drop: "a Module's helm credentials go to its repository only"},
		})
	// clusterFields are the ways a Fleet target or customization picks
	// clusters other than by their labels.
	clusterFields = map[string]verdict{
		"clusterGroup":         {refuse: whyClusterGroup},
		"clusterGroupSelector": {refuse: whyClusterGroup},
		"clusterName":          {refuse: whyClusterName},
	}
	gitRepoTargetFields = fields("name clusterSelector", clusterFields)
	fleetYAMLFields     = fields("name defaultNamespace namespace helm kustomize targetCustomizations dependsOn paused",
		same(verdict{drop: whyNoField}, "correctDrift keepResources deleteNamespace deleteCRDResources ignore"),
		same(verdict{refuse: whyNoField}, "namespaceLabels namespaceAnnotations"),
		map[string]verdict{
			"labels":          {drop: "labels of Fleet's Bundle, which only Fleet's dependsOn selectors read"},
			"diff":            {drop: "fleeet ignores no field: what Fleet's diff ignored is corrected as drift"},
			"rolloutStrategy": {drop: "a Module rolls out by its spec.rollout"},
			"serviceAccount":  {drop: whyServiceAccount},
			"imageScans":      {drop: whyNoWrites},
			"yaml":            {refuse: "a Module applies no YAML overlays"},
			"overrideTargets": {refuse: "a bundle's own targets are not imported yet; the GitRepo's targets say the Module's selector"},
		})
	fleetHelmFields = fields("chart repo version releaseName values valuesFiles valuesFrom timeoutSeconds",
		same(verdict{drop: whyNoField}, "takeOwnership force atomic waitForJobs disablePreProcess disableDNS skipSchemaValidation disableDependencyUpdate maxHistory"))
	customizationFields = fields("name clusterSelector helm kustomize", clusterFields,
		same(verdict{refuse: "the Module API has no override that changes the namespace"}, "namespace defaultNamespace"),
		map[string]verdict{
			"yaml":        {refuse: "the Module API has no override that applies YAML overlays"},
			"doNotDeploy": {refuse: "the Module API has no override that deploys nothing; narrow the selector instead"},
		})
	customizationHelmFields = fields("values", same(verdict{refuse: "the Module API has no override that changes the chart"}, "chart repo"), map[string]verdict{
		"version":     {refuse: "the Module API has no override that changes the chart's version"},
		"releaseName": {refuse: "the Module API has no override that changes the release name"},
		"valuesFiles": {refuse: "an override's values are imported from helm.values only"},
	})
)

// fleetBundle converts a Fleet bundle: its GitRepo's repository pinned,
// a Helm chart (of a repository, or by path in the git repository) or
// a kustomize path, the GitRepo's target as the selector and the
// targetCustomizations of helm values as overrides.
func (i *importer) fleetBundle(ctx context.Context, o *object, c *conversion) *fleeetv1.ModuleSpec {
	b := o.bundle
	spec := &fleeetv1.ModuleSpec{}
	var repo gitRepoSpec
	at := ""
	if b.gitRepo != nil {
		at = b.gitRepo.Kind + " " + qualified(b.gitRepo.Metadata.Namespace, b.gitRepo.Metadata.Name) + " spec"
		if !decode(b.gitRepo, at, &repo, gitRepoFields, c) {
			return nil
		}
		c.sources = append(c.sources, b.gitRepo.key())
		spec.Selector = i.fleetSelector(b.gitRepo, at, c)
		spec.Suspend = repo.Paused
	}
	var fy fleetYAML
	switch {
	case b.unread != nil:
		c.refuse("%s: %v", fleetFile, b.unread)
		return nil
	case b.fleet && !decode(o, fleetFile, &fy, fleetYAMLFields, c):
		return nil
	case !b.fleet && !b.manifests && !b.chart:
		c.refuse("%s.paths: %s holds no fleet.yaml and no manifests in the directory", at, b.dir)
		return nil
	}
	var raw struct {
		Helm      json.RawMessage `json:"helm"`
		Kustomize json.RawMessage `json:"kustomize"`
	}
	_ = json.Unmarshal(o.Spec, &raw) // decoded above
	c.check("helm", raw.Helm, fleetHelmFields)
	c.check("kustomize", raw.Kustomize, fields("dir"))
	spec.Suspend = spec.Suspend || fy.Paused
	namespace := cmp.Or(repo.TargetNamespace, fy.Namespace)

	gitSource := func() {
		switch {
		case b.gitRepo == nil:
			c.refuse("no GitRepo of the directory has %s under its paths: the Module's source is the repository one names", b.dir)
		case !strings.Contains(repo.Repo, "://"):
			c.refuse("%s.repo %s: a Module's git URL is https://, http:// or ssh://", at, repo.Repo)
		default:
			out := fleeetv1.Source{Git: &fleeetv1.GitSource{URL: repo.Repo}}
			if repo.ClientSecretName != "" {
				out.SecretRef = c.deliver(&fleeetv1.LocalObjectReference{Name: repo.ClientSecretName})
			}
			ref := &gitRef{Branch: cmp.Or(repo.Branch, "master")} // Fleet's default
			if repo.Revision != "" && fullCommit.MatchString(repo.Revision) {
				ref = &gitRef{Commit: repo.Revision}
			} else if repo.Revision != "" {
				ref = &gitRef{Tag: repo.Revision}
			}
			spec.Sync.Source, spec.VersionPolicy = i.pinGit(ctx, out, at, at+".branch", ref, c)
		}
	}
	switch h := fy.Helm; {
	case h != nil && (h.Chart != "" || b.chart):
		p := &fleeetv1.HelmPackage{ReleaseName: h.ReleaseName, TargetNamespace: cmp.Or(namespace, fy.DefaultNamespace)}
		switch {
		case h.Repo != "":
			out := fleeetv1.Source{Helm: &fleeetv1.HelmSource{URL: h.Repo, Chart: h.Chart, Version: h.Version}}
			if repo.HelmSecretName != "" {
				out.SecretRef = c.deliver(&fleeetv1.LocalObjectReference{Name: repo.HelmSecretName})
			}
			spec.Sync.Source, spec.VersionPolicy = i.pinChart(ctx, out, "helm.version", c)
		case strings.Contains(h.Chart, "://"):
			c.refuse("helm.chart %s: a chart by URL is not imported yet; give helm.repo and the chart's name", h.Chart)
		default:
			gitSource()
			p.Chart = path.Join(b.dir, cmp.Or(h.Chart, "."))
		}
		p.Values = i.fleetValues(b, fy.Helm.Values, fy.Helm.ValuesFiles, c)
		for _, v := range h.ValuesFrom {
			if r := v.ConfigMapKeyRef; r != nil {
				p.ValuesFrom = append(p.ValuesFrom, fleeetv1.ValuesReference{Kind: "ConfigMap", Name: r.Name, ValuesKey: r.Key})
			}
			if r := v.SecretKeyRef; r != nil {
				p.ValuesFrom = append(p.ValuesFrom, fleeetv1.ValuesReference{Kind: "Secret", Name: r.Name, ValuesKey: r.Key})
			}
		}
		valuesObjects("helm.valuesFrom", p.ValuesFrom, c, func(r fleeetv1.ValuesReference) (string, string) { return r.Kind, r.Name })
		if h.TimeoutSeconds > 0 {
			p.Timeout = &metav1.Duration{Duration: time.Duration(h.TimeoutSeconds) * time.Second}
		}
		spec.Sync.Package.Helm = p
	case h != nil && (len(h.Values) > 0 || len(h.ValuesFiles) > 0):
		c.refuse("helm: values for manifests that are not a chart: Fleet templates them, a Module applies them as they are")
	default:
		gitSource()
		dir := ""
		if fy.Kustomize != nil {
			dir = fy.Kustomize.Dir
		}
		p := &fleeetv1.KustomizePackage{Path: kustomizePath(b.dir, dir, "kustomize.dir", c), TargetNamespace: namespace}
		if p.TargetNamespace == "" && fy.DefaultNamespace != "" {
			p.TargetNamespace = fy.DefaultNamespace
			c.rewrite("defaultNamespace %s: package.kustomize.targetNamespace sets every namespaced object's namespace, where Fleet sets only those without one", fy.DefaultNamespace)
		}
		spec.Sync.Package.Kustomize = p
	}
	spec.Overrides = customizations(fy.TargetCustomizations, spec.Sync.Package.Helm != nil, b.dir, c)
	for n, d := range fy.DependsOn {
		if len(d.Selector) > 0 {
			c.refuse("dependsOn[%d].selector: a Module depends on Modules by name", n)
			continue
		}
		spec.Sync.DependsOn = append(spec.Sync.DependsOn, fleeetv1.Dependency{Name: bundleName(d.Name)})
	}
	return spec
}

// fleetSelector is the selector of a GitRepo's targets (targetsSelector),
// and of the import's --selector; Fleet's default target, the cluster group
// default, is taken for --selector's Remotes.
func (i *importer) fleetSelector(repo *object, at string, c *conversion) *metav1.LabelSelector {
	var targets struct {
		Targets []json.RawMessage `json:"targets"`
	}
	_ = json.Unmarshal(repo.Spec, &targets) // decoded by the caller
	var spec gitRepoSpec
	_ = json.Unmarshal(repo.Spec, &spec)
	for n, t := range targets.Targets {
		c.check(fmt.Sprintf("%s.targets[%d]", at, n), t, gitRepoTargetFields)
	}
	out := i.opts.Selector.DeepCopy()
	switch {
	case len(spec.Targets) == 0:
		c.rewrite("%s.targets: none, so Fleet deploys to its cluster group default; the Module selects the Remotes --selector selects", at)
		return out
	}
	var selectors []*metav1.LabelSelector
	for n, t := range spec.Targets {
		if t.ClusterSelector == nil {
			c.refuse("%s.targets[%d]: no clusterSelector; a Module selects Remotes by their labels", at, n)
			return out
		}
		selectors = append(selectors, t.ClusterSelector)
	}
	sel, ok := targetsSelector(selectors)
	if !ok {
		c.refuse("%s.targets: %d targets whose clusterSelectors are not one label's values (and the same other labels); a Module selects the Remotes of one label selector", at, len(spec.Targets))
		return out
	}
	if len(selectors) > 1 {
		in := sel.MatchExpressions[0]
		c.rewrite("%s.targets: %d targets, one selector: %s in (%s)", at, len(selectors), in.Key, strings.Join(in.Values, ", "))
	}
	if out == nil {
		out = &metav1.LabelSelector{}
	}
	for k, v := range sel.MatchLabels {
		if w, set := out.MatchLabels[k]; set && w != v {
			c.refuse("%s.targets: clusterSelector %s=%s, where --selector says %s=%s", at, k, v, k, w)
		}
		if out.MatchLabels == nil {
			out.MatchLabels = map[string]string{}
		}
		out.MatchLabels[k] = v
	}
	out.MatchExpressions = append(out.MatchExpressions, sel.MatchExpressions...)
	return out
}

// targetsSelector is one selector picking the clusters that any of
// selectors picks, as Fleet deploys to a cluster any target matches: the
// one selector, or, when each holds matchLabels alone, the same labels but
// for one whose values differ, those labels and that one's values (In).
// Anything else has no single label selector, and is not ok.
func targetsSelector(selectors []*metav1.LabelSelector) (*metav1.LabelSelector, bool) {
	if len(selectors) == 1 {
		return selectors[0], true
	}
	first := selectors[0].MatchLabels
	differ := ""
	for _, sel := range selectors {
		if len(sel.MatchExpressions) > 0 || len(sel.MatchLabels) != len(first) {
			return nil, false
		}
		for k, v := range sel.MatchLabels {
			w, ok := first[k]
			switch {
			case !ok:
				return nil, false
			case w != v && differ == "":
				differ = k
			case w != v && differ != k:
				return nil, false
			}
		}
	}
	out := &metav1.LabelSelector{MatchLabels: maps.Clone(first)}
	if differ == "" {
		return out, true
	}
	delete(out.MatchLabels, differ)
	if len(out.MatchLabels) == 0 {
		out.MatchLabels = nil
	}
	var values []string
	for _, sel := range selectors {
		values = append(values, sel.MatchLabels[differ])
	}
	slices.Sort(values)
	out.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: differ, Operator: metav1.LabelSelectorOpIn, Values: slices.Compact(values)}}
	return out, true
}

// fleetValues merges, as Fleet does, the valuesFiles of the bundle's
// directory in order, then values over them.
func (i *importer) fleetValues(b *bundle, values map[string]any, files []string, c *conversion) *apiextensionsv1.JSON {
	merged := map[string]any{}
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(b.root, filepath.FromSlash(path.Join(b.dir, f))))
		var v map[string]any
		if err == nil {
			err = yaml.Unmarshal(raw, &v)
		}
		if err != nil {
			c.refuse("helm.valuesFiles %s: %v", f, err)
			continue
		}
		merged = mergeValues(merged, v)
	}
	if len(files) > 0 {
		c.rewrite("helm.valuesFiles %s merged into package.helm.values at import", strings.Join(files, ", "))
	}
	merged = mergeValues(merged, values)
	if len(merged) == 0 {
		return nil
	}
	raw, err := json.Marshal(merged)
	if err != nil {
		c.refuse("helm.values: %v", err)
		return nil
	}
	return &apiextensionsv1.JSON{Raw: raw}
}

// mergeValues deep-merges over into base as Helm merges values files:
// objects key by key, anything else replaced.
func mergeValues(base, over map[string]any) map[string]any {
	for k, v := range over {
		if sub, ok := v.(map[string]any); ok {
			if have, ok := base[k].(map[string]any); ok {
				base[k] = mergeValues(have, sub)
				continue
			}
		}
		base[k] = v
	}
	return base
}

// customizations converts targetCustomizations that change helm values,
// or the kustomize dir of a bundle in the repository's directory dir, for
// the clusters a label selector picks into overrides. Fleet applies the
// first customization that matches a cluster, a Module every override that
// matches, so the selectors must not overlap: each pair must ask one label
// for different values.
func customizations(raws []json.RawMessage, helm bool, dir string, c *conversion) []fleeetv1.Override {
	var out []fleeetv1.Override
	for n, raw := range raws {
		var tc customization
		if err := json.Unmarshal(raw, &tc); err != nil {
			c.refuse("targetCustomizations[%d]: %v", n, err)
			continue
		}
		at := fmt.Sprintf("targetCustomizations[%d] (%s)", n, tc.Name)
		c.check(at, raw, customizationFields)
		var helmRaw struct {
			Helm json.RawMessage `json:"helm"`
		}
		_ = json.Unmarshal(raw, &helmRaw) // decoded above
		c.check(at+".helm", helmRaw.Helm, customizationHelmFields)
		switch {
		case len(validation.IsDNS1123Label(tc.Name)) > 0:
			c.refuse("%s.name: an override's name is a DNS label", at)
		case tc.ClusterSelector == nil:
			c.refuse("%s: no clusterSelector; an override selects Remotes by their labels", at)
		case tc.Helm != nil && !helm:
			c.refuse("%s.helm: helm values for a bundle that is not a Helm chart", at)
		case tc.Kustomize != nil && helm:
			c.refuse("%s.kustomize: a kustomize dir for a bundle that is a Helm chart", at)
		}
		o := fleeetv1.Override{Name: tc.Name}
		if tc.ClusterSelector != nil {
			o.Selector = *tc.ClusterSelector
		}
		switch {
		case tc.Helm != nil && tc.Helm.Values != nil:
			o.Helm = &fleeetv1.HelmOverride{Values: tc.Helm.Values}
		case tc.Kustomize != nil && tc.Kustomize.Dir != "" && !helm:
			o.Kustomize = &fleeetv1.KustomizeOverride{Path: kustomizePath(dir, tc.Kustomize.Dir, at+".kustomize.dir", c)}
		default:
			c.rewrite("%s: changes nothing a Module says; left out", at)
			continue
		}
		for _, prev := range out {
			if !disjoint(prev.Selector, o.Selector) {
				c.refuse("%s: its clusterSelector and %s's may pick the same cluster; Fleet applies only the first that matches, a Module every override that matches", at, prev.Name)
			}
		}
		out = append(out, o)
	}
	if len(out) > 16 {
		c.refuse("targetCustomizations: %d; a Module takes 16 overrides", len(out))
	}
	return out
}

// disjoint says whether no labels match both selectors, as far as their
// matchLabels say.
func disjoint(a, b metav1.LabelSelector) bool {
	for k, v := range a.MatchLabels {
		if w, set := b.MatchLabels[k]; set && w != v {
			return true
		}
	}
	return false
}

// kustomizePath is the kustomize path of dir, relative to the bundle's
// directory bundle in the repository, as a Module names it; a dir outside
// the repository is refused, naming field.
func kustomizePath(bundle, dir, field string, c *conversion) string {
	p := path.Join(bundle, dir)
	if p == ".." || strings.HasPrefix(p, "../") {
		c.refuse("%s %s: outside the repository", field, dir)
	}
	return "./" + strings.TrimPrefix(p, ".")
}
