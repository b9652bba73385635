package testenv

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
)

// ChartRepo is a Helm chart repository served over HTTP from a directory of
// packaged charts and the index.yaml `helm repo index` writes for them.
type ChartRepo struct {
	// URL is the repository URL to give a HelmRepository or `helm repo add`.
	URL string
}

// ChartDir returns the directory of a chart kept under
// internal/testenv/testdata/charts for tests.
func ChartDir(name string) string {
	return filepath.Join(RepoRoot, "internal", "testenv", "testdata", "charts", name)
}

// NewChartRepo packages each chart directory with the pinned helm CLI, indexes
// them and serves the result on loopback until the test ends.
func NewChartRepo(t TB, chartDirs ...string) *ChartRepo {
	t.Helper()
	helm, err := tool("helm")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)

	// Keep helm away from the user's own configuration and cache.
	home := t.TempDir()
	helmCmd := func(args ...string) {
		t.Helper()
		args = append(args,
			"--repository-config", filepath.Join(home, "repositories.yaml"),
			"--repository-cache", filepath.Join(home, "cache"),
			"--registry-config", filepath.Join(home, "registry.json"),
		)
		if _, err := runIn(dir, helm, args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, chart := range chartDirs {
		helmCmd("package", chart, "--destination", dir)
	}
	helmCmd("repo", "index", dir, "--url", srv.URL)
	return &ChartRepo{URL: srv.URL}
}
