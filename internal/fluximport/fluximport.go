// Package fluximport turns a checkout of Flux objects into Modules:
// each Kustomization and HelmRelease becomes a Module carrying its source
// (GitRepository, HelmRepository or OCIRepository) pinned to one exact
// version, and a Report says, object by object, what was converted as it
// is, what was rewritten on the way (a branch pinned to its commit, a range
// resolved to a version) and what the Module API cannot say. It reads
// Rancher Fleet's GitRepos and fleet.yaml bundles too (fleet.go), reported
// the same way. fleetctl import is its command line.
package fluximport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Options say where the imported Modules go and how sources are read.
type Options struct {
	// Namespace is the tenant namespace the Modules are created in.
	Namespace string
	// Selector selects the Remotes every Module is placed on.
	Selector *metav1.LabelSelector
	// HTTP reads git ref advertisements and Helm repository indexes, to pin
	// branches and resolve ranges.
	HTTP *http.Client
}

// Outcome is what became of one object.
type Outcome string

const (
	// Converted objects say in a Module exactly what they said in Flux.
	Converted Outcome = "converted"
	// Rewritten objects became a Module that differs in what its notes say.
	Rewritten Outcome = "converted with rewrites"
	// NotConverted objects became no Module; their notes say why.
	NotConverted Outcome = "not converted"
)

// Report says what the import did with each object it read.
type Report struct {
	Objects []ObjectReport `json:"objects"`
	// Secrets are named by the Modules and delivered to their clusters
	// from the tenant namespace (spec.sync.secrets): each must be copied
	// there and labelled fleeet.dev/deliverable=true.
	Secrets []SecretUse `json:"secrets,omitempty"`
	Counts  Counts      `json:"counts"`
	// Namespace and Selector are where every Module goes.
	Namespace string `json:"namespace"`
	Selector  string `json:"selector"`
	// Applied says, with fleetctl import --apply, what the management
	// cluster made of each Module.
	Applied []Applied `json:"applied,omitempty"`
}

// Applied is the management cluster's answer to creating one Module.
type Applied struct {
	Module string `json:"module"`
	// Refusal is why admission or the API refused it; empty, it was
	// created.
	Refusal string `json:"refusal,omitempty"`
}

// ObjectReport is the outcome for one object of the checkout.
type ObjectReport struct {
	Kind      string  `json:"kind"`
	Namespace string  `json:"namespace,omitempty"`
	Name      string  `json:"name"`
	File      string  `json:"file"`
	Outcome   Outcome `json:"outcome"`
	// Module is the Module the object became, or that its source went into.
	Module string `json:"module,omitempty"`
	// Notes are the rewrites, or why the object was not converted, each
	// naming the field.
	Notes []string `json:"notes,omitempty"`
}

// SecretUse is one Secret the Modules deliver, and the Modules naming it.
type SecretUse struct {
	Name    string   `json:"name"`
	Modules []string `json:"modules"`
}

// Counts sum the outcomes.
type Counts struct {
	Converted    int `json:"converted"`
	Rewritten    int `json:"convertedWithRewrites"`
	NotConverted int `json:"notConverted"`
	// OtherKinds are the not converted objects that are not Flux objects
	// the import reads, such as the manifests a Kustomization's path holds.
	OtherKinds int `json:"otherKinds"`
	Modules    int `json:"modules"`
}

// object is one document of the checkout.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
	file string
	// bundle is set on a Rancher Fleet bundle, whose Spec is its fleet.yaml.
	bundle *bundle
}

// group is the API group of the object's apiVersion.
func (o *object) group() string {
	g, _, _ := strings.Cut(o.APIVersion, "/")
	return g
}

// key names the object among those of its kind.
func (o *object) key() string { return o.Kind + "/" + o.Metadata.Namespace + "/" + o.Metadata.Name }

func (o *object) report(outcome Outcome, module string, notes []string) ObjectReport {
	return ObjectReport{Kind: o.Kind, Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, File: o.file,
		Outcome: outcome, Module: module, Notes: notes}
}

// Import reads every *.yaml and *.yml file under dir (directories whose
// name starts with a dot skipped) and converts the Flux objects in them.
// Files are named relative to dir in the report.
func Import(ctx context.Context, dir string, o Options) ([]fleeetv1.Module, *Report, error) {
	chk, err := read(dir)
	if err != nil {
		return nil, nil, err
	}
	i := &importer{opts: o, sources: map[string]*object{}, usedBy: map[string][]string{}, secrets: map[string][]string{}}
	modules, report := i.run(ctx, append(chk.objects, chk.bundles()...))
	return modules, report, nil
}

// checkout is what the directory walk found: the Kubernetes objects, and
// for Rancher Fleet input the directories holding a fleet.yaml, a Helm
// chart or manifests, by slash-separated path relative to the root.
type checkout struct {
	root    string
	objects []*object
	// fleetFiles are the fleet.yaml files by their directory.
	fleetFiles map[string][]byte
	charts     map[string]bool
	manifests  map[string]bool
}

// read decodes every Kubernetes object of the YAML files under dir, in
// file order; documents without a kind are not objects and are skipped.
// A fleet.yaml makes its directory a Rancher Fleet bundle.
func read(dir string) (*checkout, error) {
	chk := &checkout{root: dir, fleetFiles: map[string][]byte{}, charts: map[string]bool{}, manifests: map[string]bool{}}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if err == nil && path != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return err
		}
		if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch dir := filepath.ToSlash(filepath.Dir(rel)); d.Name() {
		case fleetFile:
			chk.fleetFiles[dir] = raw
			return nil
		case "Chart.yaml":
			chk.charts[dir] = true
		default:
			chk.manifests[dir] = true
		}
		docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for n := 1; ; n++ {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			o := &object{file: rel}
			if err := yaml.Unmarshal(doc, o); err != nil {
				return fmt.Errorf("%s: document %d: %w", rel, n, err)
			}
			if o.Kind != "" {
				chk.objects = append(chk.objects, o)
			}
		}
	})
	return chk, err
}

// Print writes the report as lines a person reads: one per object, then
// the Secrets to deliver and the counts.
func (r *Report) Print(w io.Writer) {
	for _, o := range r.Objects {
		line := strings.TrimSpace(o.Kind+" "+qualified(o.Namespace, o.Name)) + fmt.Sprintf(" (%s): %s", o.File, o.Outcome)
		if o.Module != "" {
			line += " → Module " + o.Module
		}
		if len(o.Notes) > 0 {
			line += ": " + strings.Join(o.Notes, "; ")
		}
		fmt.Fprintln(w, line)
	}
	for _, s := range r.Secrets {
		fmt.Fprintf(w, "Secret %s (Modules %s): copy it into namespace %s on the management cluster and label it fleeet.dev/deliverable=true\n",
			s.Name, strings.Join(s.Modules, ", "), r.Namespace)
	}
	for _, a := range r.Applied {
		if a.Refusal == "" {
			fmt.Fprintf(w, "Module %s/%s created\n", r.Namespace, a.Module)
		} else {
			fmt.Fprintf(w, "Module %s/%s refused: %s\n", r.Namespace, a.Module, a.Refusal)
		}
	}
	c := r.Counts
	fmt.Fprintf(w, "%d Modules in namespace %s, selecting Remotes by %s; %d converted, %d converted with rewrites, %d not converted (%d of other kinds)\n",
		c.Modules, r.Namespace, r.Selector, c.Converted, c.Rewritten, c.NotConverted, c.OtherKinds)
}

func qualified(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// count fills in the counts and sorts the Secrets.
func (r *Report) count(modules int) {
	r.Counts = Counts{Modules: modules, OtherKinds: r.Counts.OtherKinds}
	for _, o := range r.Objects {
		switch o.Outcome {
		case Converted:
			r.Counts.Converted++
		case Rewritten:
			r.Counts.Rewritten++
		case NotConverted:
			r.Counts.NotConverted++
		}
	}
	slices.SortFunc(r.Secrets, func(a, b SecretUse) int { return strings.Compare(a.Name, b.Name) })
}

// Manifest writes a Module as YAML as a person would write it: without
// status and the empty creationTimestamp.
func Manifest(m *fleeetv1.Module) ([]byte, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		return nil, err
	}
	delete(obj, "status")
	unstructured.RemoveNestedField(obj, "metadata", "creationTimestamp")
	return yaml.Marshal(obj)
}

// Refused is an error naming how many Modules the management cluster
// refused, or nil.
func (r *Report) Refused() error {
	n := 0
	for _, a := range r.Applied {
		if a.Refusal != "" {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d Modules refused, listed in the report", n, len(r.Applied))
}
