package fleetctl_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetctl"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// offlineFleet is one Remote and a kustomize Module from git at %[2]s of
// repository %[1]s, path %[3]s.
const offlineFleet = `apiVersion: fleeet.dev/v1alpha1
kind: Remote
metadata: {name: edge-1, labels: {region: eu}}
---
apiVersion: fleeet.dev/v1alpha1
kind: Module
metadata: {name: web}
spec:
  selector: {matchLabels: {region: eu}}
  sync:
    source: {git: {url: "%[1]s", tag: %[2]s}}
    package: {kustomize: {path: %[3]s}}
`

// offlineRun runs fleetctl -n team-a diff --offline with args, reading no
// cluster nor any kubeconfig.
func offlineRun(t *testing.T, args ...string) (string, error) {
	cmd := fleetctl.NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--kubeconfig", filepath.Join(t.TempDir(), "absent"), "-n", "team-a", "diff", "--offline"}, args...))
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

func TestDiffOfflineComparesTwoCheckoutsWithNoCluster(t *testing.T) {
	g := NewWithT(t)
	podinfo := testenv.GetPodinfo(t)
	git := testenv.NewGitServer(t)
	pull := func(policy string) func(string, []byte) []byte {
		return func(_ string, content []byte) []byte {
			return bytes.Replace(content, []byte("imagePullPolicy: IfNotPresent"), []byte("imagePullPolicy: "+policy), 1)
		}
	}
	repo, _ := git.Commit(t, "podinfo", podinfo.Kustomize(t, "deploy", pull("IfNotPresent")), "v1.0.0")
	git.Commit(t, "podinfo", podinfo.Kustomize(t, "deploy", pull("Always")), "v1.1.0")
	checkout := func(tag, path string) string {
		dir := t.TempDir()
		g.Expect(os.WriteFile(filepath.Join(dir, "fleet.yaml"), []byte(fmt.Sprintf(offlineFleet, repo, tag, path)), 0o600)).To(Succeed())
		return dir
	}
	base := checkout("v1.0.0", "./deploy")

	out, err := offlineRun(t, "--base", base, "-f", checkout("v1.1.0", "./deploy"))
	differs(g, err, out)
	g.Expect(out).To(ContainSubstring("--- base/team-a/edge-1/web\n+++ head/team-a/edge-1/web\n"))
	g.Expect(out).To(ContainSubstring("\n-        imagePullPolicy: IfNotPresent\n+        imagePullPolicy: Always\n"))
	g.Expect(out).To(HaveSuffix("\n1 rendering(s) differ on 1 Remote(s)\n"))

	out, err = offlineRun(t, "--base", base, "-f", checkout("v1.0.0", "./deploy"), "-o", "json")
	g.Expect(err).NotTo(HaveOccurred(), out)
	var view fleetctl.OfflineView
	g.Expect(json.Unmarshal([]byte(out), &view)).To(Succeed())
	g.Expect(view).To(Equal(fleetctl.OfflineView{}))

	out, err = offlineRun(t, "--base", base, "-f", checkout("v1.1.0", "./nowhere"))
	g.Expect(fleetctl.ExitCode(err)).To(Equal(2), out)
	g.Expect(out).To(ContainSubstring(`render failed: team-a/edge-1/web: sync web: package.kustomize.path "./nowhere": not in the source`))
	g.Expect(out).To(ContainSubstring("+# render failed: "), "the diff shows the failure too")

	out, err = offlineRun(t, "-f", base, "--remote", "edge-1")
	g.Expect(fleetctl.ExitCode(err)).To(Equal(2), out)
	g.Expect(out).To(ContainSubstring("--offline previews two checkouts"))
}

// A new Module that fits in none of the parts of a Remote's plan, each
// within --max-plan-bytes, is left out of the head's plan, as the manager
// leaves it out of the plan the Remote holds (the base's): named in the
// plan's notes and never rendered; no sync the base's plan holds is dropped
// for it, not even one whose name comes after it.
func TestDiffOfflineLeavesOutAModuleThePlanHasNoRoomFor(t *testing.T) {
	g := NewWithT(t)
	podinfo := testenv.GetPodinfo(t)
	repo, _ := testenv.NewGitServer(t).Commit(t, "podinfo", podinfo.Kustomize(t, "deploy", nil), "v1.0.0")
	// Each sync is about 1,100 bytes: a part of 1,600 holds one.
	module := func(name string) string {
		return fmt.Sprintf("---\napiVersion: fleeet.dev/v1alpha1\nkind: Module\nmetadata: {name: %s}\nspec:\n"+
			"  selector: {matchLabels: {region: eu}}\n"+
			"  sync:\n    source: {git: {url: %q, tag: v1.0.0}}\n    package: {kustomize: {path: ./deploy, substitute: {FILL: %s}}}\n",
			name, repo, strings.Repeat("x", 900))
	}
	fleet := "apiVersion: fleeet.dev/v1alpha1\nkind: Remote\nmetadata: {name: edge-1, labels: {region: eu}}\n"
	for i := 1; i <= fleeetv1.MaxPlanParts; i++ {
		fleet += module(fmt.Sprintf("m%d", i))
	}
	checkout := func(fleet string) string {
		dir := t.TempDir()
		g.Expect(os.WriteFile(filepath.Join(dir, "fleet.yaml"), []byte(fleet), 0o600)).To(Succeed())
		return dir
	}

	out, err := offlineRun(t, "--max-plan-bytes", "1600", "--base", checkout(fleet), "-f", checkout(fleet+module("a0")))
	differs(g, err, out)
	g.Expect(out).To(MatchRegexp(`^--- /dev/null\n\+\+\+ head/team-a/edge-1/\(plan\)\n@@ -0,0 \+1 @@\n` +
		`\+# Module a0 left out of the plan of Remote edge-1: with it the plan would be \d+ bytes, and none of its 8 part\(s\) of at most 1600 bytes \(--max-plan-bytes\) has room for it\n` +
		`1 rendering\(s\) differ on 1 Remote\(s\)\n$`))
}
