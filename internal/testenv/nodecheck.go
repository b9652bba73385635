package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// NodesUnsupported says why this machine cannot run testenv nodes, or
// returns "" when it can: nodes need Linux, root, the Debian packages
// hack/setup-debian.sh installs (containerd, runc, the CNI plugins,
// iptables), overlayfs, mounted cgroups, and runc able to start a
// container. Tests that need a node are skipped with this reason, so a
// machine that cannot run containers never fakes them.
var NodesUnsupported = sync.OnceValue(func() string {
	if runtime.GOOS != "linux" {
		return "nodes run on Linux only"
	}
	if os.Geteuid() != 0 {
		return "nodes need root (network namespaces, mounts, cgroups)"
	}
	var missing []string
	for _, p := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "ip", "iptables", "sysctl"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniDir, p)); err != nil {
			missing = append(missing, filepath.Join(cniDir, p))
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("missing %s (hack/setup-debian.sh installs containerd, runc, the CNI plugins and iptables)", strings.Join(missing, ", "))
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "\toverlay\n") {
		return "the kernel has no overlay filesystem"
	}
	if len(cgroupHierarchies()) == 0 {
		return "no cgroup hierarchy is mounted under " + cgroupMount
	}
	if wrong := kernelDefaultsKubeletWants(); len(wrong) > 0 {
		return fmt.Sprintf("kubelet (protectKernelDefaults) refuses to start unless %s; hack/setup-debian.sh sets them",
			strings.Join(wrong, ", "))
	}
	if err := runcStartsContainers(); err != nil {
		return "runc cannot start a container: " + err.Error()
	}
	return ""
})

// runcStartsContainers starts and deletes a container of the pause binary
// with runc's default specification (namespaces, cgroups, capabilities).
func runcStartsContainers() error {
	pause, err := pauseBinary()
	if err != nil {
		return fmt.Errorf("building the pause binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "fleeet-runc-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bundle, state := filepath.Join(dir, "bundle"), filepath.Join(dir, "state")
	if err := os.MkdirAll(filepath.Join(bundle, "rootfs"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(bundle, "rootfs", "pause"), pause, 0o755); err != nil {
		return err
	}
	if _, err := runIn(bundle, "runc", "spec"); err != nil {
		return err
	}
	var spec map[string]any
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err == nil {
		err = json.Unmarshal(data, &spec)
	}
	if err != nil {
		return err
	}
	process, _ := spec["process"].(map[string]any)
	if process == nil {
		return fmt.Errorf("runc spec wrote no process")
	}
	process["terminal"], process["args"] = false, []string{"/pause"}
	if data, err = json.Marshal(spec); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		return err
	}
	id := filepath.Base(dir)
	// The container inherits runc's standard streams; with pipes, runc
	// would not return while the container runs.
	stderr := filepath.Join(dir, "stderr")
	f, err := os.Create(stderr)
	if err != nil {
		return err
	}
	cmd := exec.Command("runc", "--root", state, "run", "--detach", "--bundle", bundle, id)
	cmd.Stderr = f
	err = cmd.Run()
	f.Close()
	_, delErr := runIn("", "runc", "--root", state, "delete", "--force", id)
	if err != nil {
		msg, _ := os.ReadFile(stderr)
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(msg)))
	}
	return delErr
}

// skip skips the test, or fails it where the harness cannot skip (make
// demo's TB).
func skip(t TB, reason string) {
	t.Helper()
	if s, ok := t.(interface{ Skip(args ...any) }); ok {
		s.Skip(reason)
	}
	t.Fatal(reason)
}

// kubeletKernelDefaults are the kernel settings kubelet expects. With
// protectKernelDefaults it fails to start when one differs; without, it
// would rewrite them for the whole host, so testenv's kubelets protect them
// and the host must be set up beforehand (hack/setup-debian.sh does).
var kubeletKernelDefaults = []struct{ key, value string }{
	{"vm/overcommit_memory", "1"},
	{"vm/panic_on_oom", "0"},
	{"kernel/panic", "10"},
	{"kernel/panic_on_oops", "1"},
	{"kernel/keys/root_maxkeys", "1000000"},
	{"kernel/keys/root_maxbytes", "25000000"},
}

// kernelDefaultsKubeletWants lists the kernel settings that differ from
// kubeletKernelDefaults, as "key=want (is have)".
func kernelDefaultsKubeletWants() []string {
	var wrong []string
	for _, d := range kubeletKernelDefaults {
		data, err := os.ReadFile(filepath.Join("/proc/sys", d.key))
		if have := strings.TrimSpace(string(data)); err != nil || have != d.value {
			wrong = append(wrong, fmt.Sprintf("%s=%s (is %s)", strings.ReplaceAll(d.key, "/", "."), d.value, have))
		}
	}
	return wrong
}
