// Command fluxchart keeps the fleet-agent chart's flux subchart on the Flux
// controllers fleeet is tested with: the versions pinned in hack/tools/go.mod.
// It copies each controller's CRDs from its module (config/crd/bases) into the
// subchart's crds/, labelled with the controller and its version, and sets the
// image tags in the subchart's values.yaml to those versions.
//
// The labels say which Flux this is (app.kubernetes.io/part-of: flux, the
// controller as component, its version) to whoever reads the CRDs, and
// InstalledByLabel tells the chart its own CRDs from another Flux's.
//
// Usage (from `make generate`):
//
//	go run ./hack/fluxchart charts/fleet-agent/charts/flux
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// InstalledByLabel marks a CRD this chart installed; the subchart's
// templates look for it before running a controller.
const InstalledByLabel = "fleeet.dev/installed-by"

// controller is one Flux controller the subchart installs.
type controller struct {
	// name is the controller's, its module's last element and its image's.
	name string
	// valuesKey is the controller's block in the subchart's values.yaml.
	valuesKey string
}

var controllers = []controller{
	{"source-controller", "sourceController"},
	{"kustomize-controller", "kustomizeController"},
	{"helm-controller", "helmController"},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./hack/fluxchart <subchart directory>")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "fluxchart:", err)
		os.Exit(1)
	}
}

func run(chart string) error {
	values := filepath.Join(chart, "values.yaml")
	doc, err := os.ReadFile(values)
	if err != nil {
		return err
	}
	crds := filepath.Join(chart, "crds")
	if err := os.MkdirAll(crds, 0o755); err != nil {
		return err
	}
	for _, c := range controllers {
		dir, version, err := module("github.com/fluxcd/" + c.name)
		if err != nil {
			return err
		}
		if err := copyCRDs(filepath.Join(dir, "config", "crd", "bases"), crds, c.name, version); err != nil {
			return err
		}
		if doc, err = setTag(doc, c.valuesKey, version); err != nil {
			return fmt.Errorf("%s: %w", values, err)
		}
	}
	return os.WriteFile(values, doc, 0o644)
}

// module downloads a module pinned in hack/tools and returns its directory
// in the module cache and its version.
func module(path string) (dir, version string, err error) {
	cmd := exec.Command("go", "mod", "download", "-json", path)
	cmd.Dir = filepath.Join("hack", "tools")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("go mod download %s: %w", path, err)
	}
	var m struct{ Dir, Version string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", "", fmt.Errorf("go mod download %s: %w", path, err)
	}
	return m.Dir, m.Version, nil
}

// copyCRDs writes every CRD in from into to, labelled as the CRDs of
// controller at version.
func copyCRDs(from, to, controller, version string) error {
	files, err := filepath.Glob(filepath.Join(from, "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%s holds no CRDs", from)
	}
	slices.Sort(files)
	labels := fmt.Sprintf("metadata:\n  labels:\n    app.kubernetes.io/part-of: flux\n    app.kubernetes.io/component: %s\n    app.kubernetes.io/version: %s\n    %s: fleet-agent\n",
		controller, version, InstalledByLabel)
	for _, f := range files {
		crd, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		// Controller-gen writes one CRD per file, its metadata without
		// labels; inserting them keeps the rest byte for byte.
		if bytes.Count(crd, []byte("\nmetadata:\n")) != 1 || bytes.Contains(crd, []byte("\n  labels:\n")) {
			return fmt.Errorf("%s: not one unlabelled CRD, as controller-gen writes them", f)
		}
		crd = bytes.Replace(crd, []byte("\nmetadata:\n"), []byte("\n"+labels), 1)
		if err := os.WriteFile(filepath.Join(to, filepath.Base(f)), crd, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// setTag sets the first `tag:` under the top-level key of values.yaml to
// version.
func setTag(doc []byte, key, version string) ([]byte, error) {
	start := bytes.Index(doc, []byte("\n"+key+":\n"))
	if start < 0 {
		return nil, fmt.Errorf("no top-level %s", key)
	}
	tag := regexp.MustCompile(`(?m)^    tag: .*$`)
	loc := tag.FindIndex(doc[start:])
	if loc == nil {
		return nil, errors.New("no " + key + ".image.tag")
	}
	line := "    tag: " + version
	var b strings.Builder
	b.Write(doc[:start+loc[0]])
	b.WriteString(line)
	b.Write(doc[start+loc[1]:])
	return []byte(b.String()), nil
}
