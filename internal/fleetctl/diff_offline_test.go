package fleetctl_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

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
	// No cluster is read, nor any kubeconfig.
	offlineRun := func(args ...string) (string, error) {
		cmd := fleetctl.NewCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--kubeconfig", filepath.Join(t.TempDir(), "absent"), "-n", "team-a", "diff", "--offline"}, args...))
		err := cmd.ExecuteContext(t.Context())
		return out.String(), err
	}

	out, err := offlineRun("--base", base, "-f", checkout("v1.1.0", "./deploy"))
	g.Expect(fleetctl.ExitCode(err)).To(Equal(1), out)
	g.Expect(out).To(ContainSubstring("--- base/team-a/edge-1/web\n+++ head/team-a/edge-1/web\n"))
	g.Expect(out).To(ContainSubstring("\n-        imagePullPolicy: IfNotPresent\n+        imagePullPolicy: Always\n"))
	g.Expect(out).To(HaveSuffix("\n1 rendering(s) differ on 1 Remote(s)\n"))

	out, err = offlineRun("--base", base, "-f", checkout("v1.0.0", "./deploy"), "-o", "json")
	g.Expect(err).NotTo(HaveOccurred(), out)
	var view fleetctl.OfflineView
	g.Expect(json.Unmarshal([]byte(out), &view)).To(Succeed())
	g.Expect(view).To(Equal(fleetctl.OfflineView{}))

	out, err = offlineRun("--base", base, "-f", checkout("v1.1.0", "./nowhere"))
	g.Expect(fleetctl.ExitCode(err)).To(Equal(2), out)
	g.Expect(out).To(ContainSubstring(`render failed: team-a/edge-1/web: sync web: package.kustomize.path "./nowhere": not in the source`))
	g.Expect(out).To(ContainSubstring("+# render failed: "), "the diff shows the failure too")

	out, err = offlineRun("-f", base, "--remote", "edge-1")
	g.Expect(fleetctl.ExitCode(err)).To(Equal(2), out)
	g.Expect(out).To(ContainSubstring("--offline previews two checkouts"))
}
