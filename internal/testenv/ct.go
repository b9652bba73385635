package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// ChartTestingInstall runs chart-testing's `ct install` for the chart in
// chartDir against c: ct installs it once with each of its
// ci/*-values.yaml, waits for it, runs `helm test` and uninstalls it,
// failing the test on the first step that fails. Each install goes into
// namespace, which must exist, or with namespace "" into one ct creates
// for it and deletes after the uninstall. args are added to ct's (such as
// --helm-extra-set-args). ct's output goes to the test's log.
func ChartTestingInstall(t TB, c *Cluster, chartDir, namespace string, args ...string) {
	t.Helper()
	paths := map[string]string{}
	for _, name := range []string{"ct", "helm", "kubectl"} {
		p, err := tool(name)
		if err != nil {
			t.Fatal(err)
		}
		paths[name] = p
	}
	home := t.TempDir()
	settings := map[string]any{
		"chart-dirs":              []string{filepath.Dir(chartDir)},
		"charts":                  []string{chartDir},
		"target-branch":           "main",
		"validate-maintainers":    false,
		"validate-chart-schema":   false,
		"check-version-increment": false,
		"release-label":           "app.kubernetes.io/instance",
		"helm-extra-args":         "--timeout 240s",
	}
	if namespace != "" {
		settings["namespace"] = namespace
	}
	config, err := yaml.Marshal(settings)
	if err != nil {
		t.Fatal(err)
	}
	configPath := filepath.Join(home, "ct.yaml")
	if err := os.WriteFile(configPath, config, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), paths["ct"], append([]string{"install", "--config", configPath}, args...)...)
	cmd.Dir = filepath.Dir(chartDir)
	cmd.Env = append(os.Environ(), append(helmHomes(home), "KUBECONFIG="+c.Kubeconfig,
		"PATH="+filepath.Dir(paths["helm"])+":"+filepath.Dir(paths["kubectl"])+":"+os.Getenv("PATH"))...)
	logPath := filepath.Join(home, "ct.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	t.Logf("ct install %s: log at %s", filepath.Base(chartDir), logPath)
	err = cmd.Run()
	out, _ := os.ReadFile(logPath)
	t.Logf("ct install %s:\n%s", filepath.Base(chartDir), strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("ct install %s: %v", filepath.Base(chartDir), err)
	}
}
