// Package offline previews a fleet kept in files, with no management
// cluster: it reads Modules, Remotes and the ConfigMaps control-plane
// bindings read from a checkout (Load), compiles each Remote's plan with the
// manager's own compiler (Fleet.Plans), renders each sync of a plan into the
// manifests Flux would apply downstream (Renderer: kustomize build with
// Flux's post-build substitution, or helm template), and compares two
// checkouts cluster by cluster and sync by sync (Compare). fleetctl diff
// --offline is its command line.
package offline

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
)

// Fleet is what a checkout holds of a fleet, by management namespace.
type Fleet struct {
	Namespaces map[string]*Namespace
}

// Namespace is one management namespace's objects as files hold them.
type Namespace struct {
	Modules    []fleeetv1.Module
	Remotes    []fleeetv1.Remote
	ConfigMaps map[string]*corev1.ConfigMap
	// from records the file each object came from, by kind/name, to name
	// both files of a duplicate.
	from map[string]string
}

// Load reads every YAML or JSON file under paths (files or directories;
// directories whose name starts with a dot, such as .git, are skipped) and
// keeps the fleeet.dev Modules and Remotes and the ConfigMaps, alone or in a
// List as kubectl get -o yaml writes them (pull-mode Remotes are made by
// registration, so a checkout holds them exported); other documents are
// skipped, since a checkout holds much else. An object without
// a namespace is in namespace. A fleeet.dev document is decoded strictly, so
// a misspelt field is an error naming the file and the document.
func Load(namespace string, paths ...string) (*Fleet, error) {
	f := &Fleet{Namespaces: map[string]*Namespace{}}
	for _, root := range paths {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && path != root && strings.HasPrefix(d.Name(), "."):
				return filepath.SkipDir
			case d.IsDir():
				return nil
			}
			switch filepath.Ext(path) {
			case ".yaml", ".yml", ".json":
				return f.loadFile(namespace, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}

// loadFile reads each document of one file.
func (f *Fleet) loadFile(namespace, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for i := 0; ; i++ {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := f.loadDocument(namespace, path, doc); err != nil {
			return fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
	}
}

// loadDocument keeps one document if it is a Module, a Remote or a ConfigMap.
func (f *Fleet) loadDocument(namespace, path string, doc []byte) error {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil // not a Kubernetes object: not ours to judge
	}
	var obj client.Object
	switch {
	case meta.APIVersion == "v1" && meta.Kind == "List": // kubectl get -o yaml
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := yaml.Unmarshal(doc, &list); err != nil {
			return fmt.Errorf("List: %w", err)
		}
		for i, item := range list.Items {
			if err := f.loadDocument(namespace, path, item); err != nil {
				return fmt.Errorf("items[%d]: %w", i, err)
			}
		}
		return nil
	case meta.APIVersion == fleeetv1.GroupVersion.String() && meta.Kind == "Module":
		obj = &fleeetv1.Module{}
	case meta.APIVersion == fleeetv1.GroupVersion.String() && meta.Kind == "Remote":
		obj = &fleeetv1.Remote{}
	case meta.APIVersion == "v1" && meta.Kind == "ConfigMap":
		obj = &corev1.ConfigMap{}
	default:
		return nil
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return fmt.Errorf("%s: %w", meta.Kind, err)
	}
	if obj.GetName() == "" {
		return fmt.Errorf("%s: metadata.name is empty", meta.Kind)
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(namespace)
	}
	ns := f.Namespaces[obj.GetNamespace()]
	if ns == nil {
		ns = &Namespace{ConfigMaps: map[string]*corev1.ConfigMap{}, from: map[string]string{}}
		f.Namespaces[obj.GetNamespace()] = ns
	}
	key := meta.Kind + "/" + obj.GetName()
	if first, dup := ns.from[key]; dup {
		return fmt.Errorf("%s %s/%s is defined twice, first in %s", meta.Kind, obj.GetNamespace(), obj.GetName(), first)
	}
	ns.from[key] = path
	switch o := obj.(type) {
	case *fleeetv1.Module:
		ns.Modules = append(ns.Modules, *o)
	case *fleeetv1.Remote:
		ns.Remotes = append(ns.Remotes, *o)
	case *corev1.ConfigMap:
		ns.ConfigMaps[o.Name] = o
	}
	return nil
}

// Plan is one Remote's compiled plan.
type Plan struct {
	Namespace, Remote string
	// KubeVersion is the Remote's Kubernetes version as its status says,
	// if the files hold its status.
	KubeVersion string
	Syncs       []fleeetv1.NamedSync
	// Parts are Syncs split over parts as the manager splits them: what
	// the plan compiled after it starts from (Plans).
	Parts compile.Parts
	// Notes say what the compiler left out of the plan and why: Modules
	// whose control-plane bindings do not resolve for this Remote, or that
	// would take the plan past the size limit.
	Notes []string
}

// Plans compiles every Remote's plan as the manager would once every
// rollout is through (compile.Eventual), control-plane bindings reading the
// Remote and the namespace's ConfigMaps from the files, within maxPlanBytes
// (zero: no limit). Each plan starts from the Remote's plan in held (say,
// the base checkout's), as the manager's starts from what the Remote holds:
// a change that does not fit is left out, never a sync held, which the
// compiler keeps. Plans come sorted by namespace and Remote. A Module whose
// selector is invalid is an error.
func (f *Fleet) Plans(ctx context.Context, maxPlanBytes int, held []Plan) ([]Plan, error) {
	var plans []Plan
	for _, name := range slices.Sorted(maps.Keys(f.Namespaces)) {
		ns := f.Namespaces[name]
		for _, m := range ns.Modules {
			// The compiler skips a Module whose selector is invalid, which
			// the Module's status reports; offline nothing would.
			if _, err := compile.Selects(m.Spec.Selector, &fleeetv1.Remote{}); err != nil {
				return nil, fmt.Errorf("module %s/%s: %w", name, m.Name, err)
			}
		}
		remotes := slices.Clone(ns.Remotes)
		slices.SortFunc(remotes, func(a, b fleeetv1.Remote) int { return strings.Compare(a.Name, b.Name) })
		for i := range remotes {
			var current compile.Parts
			if k := slices.IndexFunc(held, func(p Plan) bool { return p.Namespace == name && p.Remote == remotes[i].Name }); k >= 0 {
				current = held[k].Parts
			}
			parts, stamps, err := compile.Eventual(ctx, configMapReader{ns}, ns.Modules, &remotes[i], current, maxPlanBytes)
			if err != nil {
				return nil, fmt.Errorf("compiling the plan of Remote %s/%s: %w", name, remotes[i].Name, err)
			}
			p := Plan{Namespace: name, Remote: remotes[i].Name, KubeVersion: remotes[i].Status.KubernetesVersion, Syncs: parts.Union(), Parts: parts}
			for _, module := range slices.Sorted(maps.Keys(stamps)) {
				switch s := stamps[module]; {
				case s.BindingError != "":
					p.Notes = append(p.Notes, fmt.Sprintf("Module %s left out: %s", module, s.BindingError))
				case s.TooLarge != "":
					p.Notes = append(p.Notes, fmt.Sprintf("Module %s %s", module, s.TooLarge))
				}
			}
			plans = append(plans, p)
		}
	}
	return plans, nil
}

// configMapReader is the reader control-plane bindings go through: the
// namespace's ConfigMaps from the files. Nothing else is read in the
// management cluster (compile.Sync), so nothing else is served.
type configMapReader struct{ ns *Namespace }

func (r configMapReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return fmt.Errorf("reading %T %s offline: only ConfigMaps are read", obj, key.Name)
	}
	src := r.ns.ConfigMaps[key.Name]
	if src == nil {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
	}
	src.DeepCopyInto(cm)
	return nil
}

func (r configMapReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("listing offline: only ConfigMaps are read, by name")
}
