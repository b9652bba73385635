package release

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"
)

// Chart is one chart pushed as a Helm OCI artifact.
type Chart struct {
	// Name is the chart's name, the same as its image's.
	Name string
	// Ref is oci://<repository>/<name>, what `helm install` takes with --version.
	Ref string
	// Version is the chart's version and appVersion.
	Version string
	// Digest is the digest of the chart's OCI manifest.
	Digest string
}

// PackageChart packages charts/<im.Name> from the module at root into dir,
// at version (its appVersion too), with its default image pinned to im:
// image.repository is im's and image.digest im's digest, so that installing
// the chart with no image values runs exactly the image pushed with it.
// Each of set is a top-level string value the release decides (such as the
// agent chart the manager's tokens name). The chart in the checkout is
// left as it is. It returns the archive's path.
func PackageChart(root, dir, version string, im Image, set map[string]string) (string, error) {
	ch, err := loader.LoadDir(filepath.Join(root, "charts", im.Name))
	if err != nil {
		return "", fmt.Errorf("loading charts/%s: %w", im.Name, err)
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = version, version
	pinned := false
	for _, f := range ch.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		if f.Data, err = pinImage(f.Data, im.Repository, im.Digest.String()); err != nil {
			return "", fmt.Errorf("charts/%s/values.yaml: %w", im.Name, err)
		}
		for key, value := range set {
			if f.Data, err = setTopLevel(f.Data, key, value); err != nil {
				return "", fmt.Errorf("charts/%s/values.yaml: %w", im.Name, err)
			}
		}
		if ch.Values, err = chartutil.ReadValues(f.Data); err != nil {
			return "", fmt.Errorf("charts/%s/values.yaml: %w", im.Name, err)
		}
		pinned = true
	}
	if !pinned {
		return "", fmt.Errorf("charts/%s has no values.yaml to pin its image in", im.Name)
	}
	path, err := chartutil.Save(ch, dir)
	if err != nil {
		return "", fmt.Errorf("packaging charts/%s: %w", im.Name, err)
	}
	return path, nil
}

// pinImage sets image.repository and image.digest in a chart's values.yaml.
// It rewrites only those two lines, so every comment (the chart's documented
// values) stays as written, and reads the result back to be sure Helm sees
// what was meant.
func pinImage(values []byte, repository, digest string) ([]byte, error) {
	want := map[string]string{"repository": repository, "digest": digest}
	lines := strings.SplitAfter(string(values), "\n")
	inImage := false
	for i, line := range lines {
		switch {
		case strings.HasPrefix(line, "image:"):
			inImage = true
		case strings.TrimSpace(line) == "", strings.HasPrefix(line, " "), strings.HasPrefix(line, "#"):
			if !inImage {
				continue
			}
			for key, value := range want {
				if strings.HasPrefix(line, "  "+key+":") {
					lines[i] = fmt.Sprintf("  %s: %q\n", key, value)
				}
			}
		default:
			inImage = false
		}
	}
	pinned := []byte(strings.Join(lines, ""))
	vals, err := chartutil.ReadValues(pinned)
	if err != nil {
		return nil, err
	}
	for key, value := range want {
		if got, err := vals.PathValue("image." + key); err != nil || got != value {
			return nil, fmt.Errorf("image.%s is not a line of its own under image: to set to %q", key, value)
		}
	}
	return pinned, nil
}

// setTopLevel sets the top-level string value key, a line of its own, in a
// chart's values.yaml, keeping every comment, and reads the result back.
func setTopLevel(values []byte, key, value string) ([]byte, error) {
	lines := strings.SplitAfter(string(values), "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, key+":") {
			lines[i] = fmt.Sprintf("%s: %q\n", key, value)
		}
	}
	set := []byte(strings.Join(lines, ""))
	vals, err := chartutil.ReadValues(set)
	if err != nil {
		return nil, err
	}
	if got, err := vals.PathValue(key); err != nil || got != value {
		return nil, fmt.Errorf("%s is not a top-level line of its own to set to %q", key, value)
	}
	return set, nil
}

// PushChart pushes the chart archive at path as a Helm OCI artifact to
// oci://<repository>/<name>, tagged with its version, through client (which
// holds the registry's credentials), and says where it is.
func PushChart(client *registry.Client, repository, path string, created time.Time) (Chart, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Chart{}, err
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return Chart{}, fmt.Errorf("loading %s: %w", path, err)
	}
	c := Chart{
		Name:    ch.Name(),
		Ref:     registry.OCIScheme + "://" + repository + "/" + ch.Name(),
		Version: ch.Metadata.Version,
	}
	res, err := client.Push(data, repository+"/"+c.Name+":"+c.Version,
		registry.PushOptCreationTime(created.Format(time.RFC3339)))
	if err != nil {
		return Chart{}, fmt.Errorf("pushing %s at %s: %w", c.Ref, c.Version, err)
	}
	c.Digest = res.Manifest.Digest
	return c, nil
}
