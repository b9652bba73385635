package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// A node's kubelet puts its Pods' cgroups under a cgroup root of the node's
// own (cgroupRoot), so that nodes on one host never share cgroups and
// tearing a node down finds every container process of it.

const cgroupMount = "/sys/fs/cgroup"

// nodeCgroupRoot is the kubelet's cgroupRoot for the node with index.
func nodeCgroupRoot(index int) string { return fmt.Sprintf("/fleeet-node-%d", index) }

// cgroupHierarchies lists the mounted cgroup hierarchies: the one of cgroup
// v2, or each of v1's (cpu, memory, pids, the named systemd one, …).
func cgroupHierarchies() []string {
	if _, err := os.Stat(filepath.Join(cgroupMount, "cgroup.controllers")); err == nil {
		return []string{cgroupMount}
	}
	entries, _ := os.ReadDir(cgroupMount)
	var dirs []string
	for _, e := range entries {
		dir := filepath.Join(cgroupMount, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil {
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

// createCgroupRoot creates root in every hierarchy, which kubelet insists
// exists. A new v1 cpuset cgroup has no CPUs or memory nodes until given
// its parent's.
func createCgroupRoot(root string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if data, err := os.ReadFile(filepath.Join(h, f)); err == nil && h != cgroupMount {
				if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// cgroupProcs lists the processes in root and below, in any hierarchy.
func cgroupProcs(root string) []int {
	seen := map[int]bool{}
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	return pids
}

// removeCgroupRoot removes root and the cgroups below it, deepest first, in
// every hierarchy; they must hold no processes.
func removeCgroupRoot(root string) error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
