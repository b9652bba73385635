package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Node is a kubelet with its own containerd, CNI network and kube-proxy,
// registered in a cluster started WithNodes: Pods scheduled to it run as
// real containers. Images come from ImportImage, or from a registry the test
// started and named with PullFrom.
type Node struct {
	// Name is the Node object's name.
	Name string
	// IP is the node's InternalIP, where its kubelet serves; the host
	// routes to it.
	IP string
	// PodCIDR is the subnet the node's Pods get their addresses from; the
	// host routes to it, so the apiserver and the test reach Pod IPs.
	PodCIDR string
	// Containerd, Kubelet and KubeProxy are the node's processes; their
	// LogPath is printed when the test fails.
	Containerd, Kubelet, KubeProxy *Process

	// dir holds the node's state: containerd's root, state and socket,
	// kubelet's root and Pod logs. Its path is short, for unix sockets.
	dir string
	// lock holds dir's record locked while the node runs: a record nobody
	// holds belongs to a test process that ended without cleaning up.
	lock *os.File
}

// nodeRecord is what tearing a node down needs, kept in its directory so
// that a later test process can tear down a node whose process died.
type nodeRecord struct {
	// Index is the node's nodeNetwork index.
	Index int `json:"index"`
}

const (
	nodeDirPattern = "fleeet-node-*"
	nodeRecordFile = "node.json"
	// pauseImage is the sandbox image every node imports and containerd
	// starts first in each Pod; the invalid domain keeps anything from
	// pulling it.
	pauseImage = "testenv.fleeet.invalid/pause:1"
	// cniDir holds the CNI plugins of Debian's containernetworking-plugins.
	cniDir = "/usr/lib/cni"
	// kubeletDevicePluginSocket is where kubelet serves device plugins,
	// whatever its root directory.
	kubeletDevicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"
)

func (n *Node) socket() string { return filepath.Join(n.dir, "containerd.sock") }

// StartNode starts a node named name in c (which must have been started
// WithNodes), waits until it is Ready and tears it down when the test ends:
// its containers are killed, their mounts unmounted, its processes stopped,
// its network namespace, cgroups and directory removed, and its Node object
// deleted. The first node of a test process also removes nodes that earlier
// test processes left behind when they died.
//
// Each node runs containerd (overlayfs, runc), kubelet, and kube-proxy
// (iptables) in its own network namespace with its own bridge and Pod
// subnet. On a machine that cannot run containers the test is skipped,
// saying why.
func (c *Cluster) StartNode(t TB, name string) *Node {
	t.Helper()
	if why := NodesUnsupported(); why != "" {
		skip(t, "this machine cannot run testenv nodes: "+why)
	}
	ns := c.nodes
	if ns == nil {
		t.Fatalf("cluster %s was not started WithNodes", c.Name)
	}
	ns.mu.Lock()
	taken := ns.nodes[name]
	ns.nodes[name] = true
	ns.mu.Unlock()
	if taken {
		t.Fatalf("cluster %s already has a node named %s", c.Name, name)
	}
	t.Cleanup(func() {
		ns.mu.Lock()
		delete(ns.nodes, name)
		ns.mu.Unlock()
	})
	reapStaleNodes(t)
	if changed, err := enableHostForwarding(); err != nil {
		t.Fatalf("enabling IPv4 forwarding: %v", err)
	} else if changed {
		t.Logf("enabled IPv4 forwarding on the host (net.ipv4.ip_forward=1), which traffic between nodes needs")
	}
	pause, err := pauseBinary()
	if err != nil {
		t.Fatalf("building the pause image: %v", err)
	}

	dir, err := os.MkdirTemp("", strings.ReplaceAll(nodeDirPattern, "*", ""))
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Name: name, dir: dir}
	nw, err := createNodeNetwork(n.claim)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("creating the network of node %s: %v", name, err)
	}
	// Registered before any process starts, so it runs after they stopped.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting Node %s: %v", name, err)
		}
		if err := teardownNode(dir, nw.index); err != nil {
			t.Errorf("tearing down node %s: %v", name, err)
		}
		n.lock.Close()
	})
	n.IP, n.PodCIDR = nw.nodeIP, nw.podCIDR.String()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	n.startContainerd(ctx, t, nw)
	n.ImportImage(t, writePauseImage(t, pause))

	kubeletStarted := time.Now()
	n.startKubelet(ctx, t, c, nw)
	if err := waitNodeReady(ctx, c, name); err != nil {
		t.Fatalf("waiting for node %s to be Ready: %v\n%s", name, err, Tail(n.Kubelet.LogPath, 30))
	}
	t.Logf("node %s Ready %s after kubelet started", name, time.Since(kubeletStarted).Round(time.Millisecond))
	// kube-proxy reads the node's addresses from its Node object, so it
	// starts once the kubelet registered it.
	n.startKubeProxy(ctx, t, c, nw)
	return n
}

// claim records in the node's directory that the node holds a network
// index, and keeps the record locked while the node runs. The record is
// locked before it takes its name, so reapStaleNodes never sees it unlocked.
func (n *Node) claim(index int) error {
	data, err := json.Marshal(nodeRecord{Index: index})
	if err != nil {
		return err
	}
	tmp := filepath.Join(n.dir, nodeRecordFile+".new")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := os.Rename(tmp, filepath.Join(n.dir, nodeRecordFile)); err != nil {
		f.Close()
		return err
	}
	n.lock = f
	return nil
}

// nodeCommand runs path inside the node's network namespace (and only that:
// the node shares the host's mounts, so kubelet's volume mounts are the ones
// containerd sees). The process is killed if the test process dies, so a
// crashed test leaves no kubelet behind; reapStaleNodes clears the rest.
func nodeCommand(nw *nodeNetwork, path string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"--net=" + nw.netnsPath(), "--", path}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// startContainerd configures and starts the node's containerd: its own
// root, state and socket under the node's directory, the overlayfs
// snapshotter, runc without systemd, the node's CNI network and the pause
// image as sandbox.
func (n *Node) startContainerd(ctx context.Context, t TB, nw *nodeNetwork) {
	t.Helper()
	cniConf := filepath.Join(n.dir, "cni", "net.d")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		t.Fatal(err)
	}
	conflist := nw.cniConfig(filepath.Base(n.dir), filepath.Join(n.dir, "cni", "ipam"))
	if err := os.WriteFile(filepath.Join(cniConf, "10-fleeet.conflist"), []byte(conflist), 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(n.dir, "containerd.toml")
	if err := os.WriteFile(config, []byte(containerdConfig(n.dir, n.socket(), cniConf)), 0o644); err != nil {
		t.Fatal(err)
	}
	n.Containerd = startCmd(t, n.Name+"-containerd", nodeCommand(nw, "containerd", "--config", config))
	for {
		if _, err := runIn("", "ctr", "--address", n.socket(), "version"); err == nil {
			return
		}
		if exited, err := n.Containerd.Exited(); exited {
			t.Fatalf("containerd of node %s exited: %v\n%s", n.Name, err, Tail(n.Containerd.LogPath, 20))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for containerd of node %s: %v\n%s", n.Name, ctx.Err(), Tail(n.Containerd.LogPath, 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// containerdConfig is the node's containerd configuration (version 2).
// restrict_oom_score_adj keeps runc from lowering a container's OOM score
// below containerd's, which needs CAP_SYS_RESOURCE that some VMs withhold
// (runc then fails with "can't get final child's PID from pipe: EOF").
func containerdConfig(dir, socket, cniConf string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[7]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[10]q
`, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"), socket, socket+".ttrpc",
		filepath.Join(dir, "containerd", "opt"), pauseImage, filepath.Join(dir, "runc"), cniDir, cniConf, registryHosts(dir))
}

// registryHosts is the directory of per-registry hosts.toml files the
// node's containerd reads at each pull.
func registryHosts(dir string) string { return filepath.Join(dir, "containerd", "certs.d") }

// PullFrom lets the node pull images from the plain-HTTP registry at
// hostport (host:port, reachable from the node's network, as a test's
// registry on PodReachableHostIP is), as a cluster pulls from the registry
// a release was pushed to.
func (n *Node) PullFrom(t TB, hostport string) {
	t.Helper()
	dir := filepath.Join(registryHosts(n.dir), hostport)
	hosts := fmt.Sprintf("server = %[1]q\n\n[host.%[1]q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+hostport)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ImportImage loads the OCI image archive at path into the node's
// containerd, where kubelet finds it under the name its index gives
// (io.containerd.image.name, as internal/ociimage writes it). Pods use it by
// that name with imagePullPolicy IfNotPresent (the default for a tag other
// than latest) or Never.
func (n *Node) ImportImage(t TB, archive string) {
	t.Helper()
	if _, err := runIn("", "ctr", "--address", n.socket(), "--namespace", "k8s.io", "images", "import", archive); err != nil {
		t.Fatalf("importing %s into node %s: %v", archive, n.Name, err)
	}
}

// startKubelet starts the node's kubelet as system:node:<name> and waits
// until it is healthy. It serves on the node's address with client
// certificate and webhook authentication and webhook authorization, keeps
// every file under the node's directory and its Pods' cgroups under a
// cgroup root of the node's own.
func (n *Node) startKubelet(ctx context.Context, t TB, c *Cluster, nw *nodeNetwork) {
	t.Helper()
	kubeconfig := n.kubeconfig(t, c, envtest.User{Name: "system:node:" + n.Name, Groups: []string{"system:nodes"}}, "kubelet.kubeconfig")
	envtestCA, err := os.ReadFile(filepath.Join(c.env.ControlPlane.APIServer.CertDir, "client-cert-auth-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	clientCA := filepath.Join(n.dir, "kubelet-client-ca.crt")
	if err := os.WriteFile(clientCA, append(envtestCA, c.nodes.kubeletClientCA...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := createCgroupRoot(nodeCgroupRoot(nw.index)); err != nil {
		t.Fatalf("creating the cgroups of node %s: %v", n.Name, err)
	}
	config := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(config, []byte(kubeletConfig(n, nw, clientCA)), 0o644); err != nil {
		t.Fatal(err)
	}
	kubelet, err := tool("kubelet")
	if err != nil {
		t.Fatal(err)
	}
	n.Kubelet = startCmd(t, n.Name+"-kubelet", nodeCommand(nw, kubelet,
		"--config="+config,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(n.dir, "kubelet"),
		"--cert-dir="+filepath.Join(n.dir, "kubelet", "pki"),
		"--hostname-override="+n.Name,
		"--node-ip="+nw.nodeIP,
	))
	if err := n.Kubelet.WaitHTTP(ctx, fmt.Sprintf("http://%s:%d/healthz", nw.nodeIP, kubeletHealthzPort)); err != nil {
		t.Fatal(err)
	}
}

// kubeletConfig is the node's KubeletConfiguration. It runs on cgroup v1
// (failCgroupV1: false) with cgroupfs (containerd 1.6 does not tell kubelet
// its cgroup driver), tolerates swap, and refuses to change the host's
// kernel settings (protectKernelDefaults). Image garbage collection is off:
// images are imported, and nothing could pull them again; eviction waits
// until the disk is nearly full, since the host is shared with other tests.
func kubeletConfig(n *Node, nw *nodeNetwork, clientCA string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]q
failSwapOn: false
protectKernelDefaults: true
containerRuntimeEndpoint: %[2]q
address: %[3]q
port: %[4]d
readOnlyPort: 0
healthzBindAddress: %[3]q
healthzPort: %[5]d
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[6]q
authorization:
  mode: Webhook
podLogsDir: %[7]q
volumePluginDir: %[8]q
clusterDomain: cluster.local
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
shutdownGracePeriod: 0s
`, nodeCgroupRoot(nw.index), "unix://"+n.socket(), nw.nodeIP, kubeletPort, kubeletHealthzPort, clientCA,
		filepath.Join(n.dir, "logs"), filepath.Join(n.dir, "volume-plugins"))
}

// startKubeProxy starts the node's kube-proxy (iptables mode, as
// system:kube-proxy), which gives the node's Pods the cluster's ClusterIPs,
// among them the kubernetes Service that in-cluster clients dial. It leaves
// the host's conntrack table size alone.
func (n *Node) startKubeProxy(ctx context.Context, t TB, c *Cluster, nw *nodeNetwork) {
	t.Helper()
	kubeconfig := n.kubeconfig(t, c, envtest.User{Name: "system:kube-proxy"}, "kube-proxy.kubeconfig")
	kubeProxy, err := tool("kube-proxy")
	if err != nil {
		t.Fatal(err)
	}
	n.KubeProxy = startCmd(t, n.Name+"-kube-proxy", nodeCommand(nw, kubeProxy,
		"--kubeconfig="+kubeconfig,
		"--hostname-override="+n.Name,
		"--proxy-mode=iptables",
		"--cluster-cidr="+clusterPodCIDR,
		fmt.Sprintf("--healthz-bind-address=%s:%d", nw.nodeIP, kubeProxyHealthzPort),
		fmt.Sprintf("--metrics-bind-address=%s:%d", nw.nodeIP, kubeProxyMetricsPort),
		"--nodeport-addresses=primary",
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
	))
	if err := n.KubeProxy.WaitHTTP(ctx, fmt.Sprintf("http://%s:%d/healthz", nw.nodeIP, kubeProxyHealthzPort)); err != nil {
		t.Fatal(err)
	}
}

// kubeconfig writes a kubeconfig for user, with a client certificate from
// envtest's CA, into the node's directory and returns its path.
func (n *Node) kubeconfig(t TB, c *Cluster, user envtest.User, file string) string {
	t.Helper()
	u, err := c.env.AddUser(user, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(n.dir, file)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitNodeReady waits until the Node object's Ready condition is True and
// it has no NoSchedule taint left (kubelet registers it tainted not-ready
// until the node lifecycle controller sees it Ready): Pods can then be
// scheduled to it.
func waitNodeReady(ctx context.Context, c *Cluster, name string) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		node := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			last = err.Error()
			return false, nil
		}
		last = "no Ready condition"
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
				if cond.Status != corev1.ConditionTrue {
					return false, nil
				}
			}
		}
		for _, taint := range node.Spec.Taints {
			if taint.Effect == corev1.TaintEffectNoSchedule {
				last = "tainted " + taint.ToString()
				return false, nil
			}
		}
		return last != "no Ready condition", nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)", err, last)
	}
	return nil
}

// MemoryRSS returns the resident memory, in bytes, of the node's processes
// by component: kubelet, containerd, the containerd shims (one per Pod,
// holding its containers), and kube-proxy. It is for measurements.
func (n *Node) MemoryRSS() map[string]int64 {
	rss := map[string]int64{}
	for name, p := range map[string]*Process{"kubelet": n.Kubelet, "containerd": n.Containerd, "kube-proxy": n.KubeProxy} {
		if p != nil {
			rss[name] = processRSS(p.Pid())
		}
	}
	for _, pid := range processesMentioning(n.socket()) {
		rss["shims"] += processRSS(pid)
	}
	return rss
}

// processRSS is the VmRSS of a process in bytes, or 0 if it is gone.
func processRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// processesMentioning lists the processes one of whose arguments contains
// s: a path in a node's directory is in the arguments of each of its
// processes (containerd's configuration, the shims' containerd socket,
// kubelet's root) and of no other.
func processesMentioning(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// teardownNode removes everything a node made on the host, whether or not
// its processes still run: it kills its containers (by cgroup) and then its
// processes (containerd, its shims, kubelet, kube-proxy), unmounts what they
// mounted under dir, removes its cgroups, network namespace, link and route,
// the log links kubelet made in /var/log/containers and CNI's cached
// results, and finally dir.
func teardownNode(dir string, index int) error {
	var errs []error
	// Each task's bundle directory is named after its container and says
	// where its shim listens (under /run/containerd/s, whatever the state
	// directory), which a killed shim leaves behind.
	var containers, shimSockets []string
	bundles, _ := filepath.Glob(filepath.Join(dir, "containerd", "state", "io.containerd.runtime.v2.task", "*", "*"))
	for _, b := range bundles {
		containers = append(containers, filepath.Base(b))
		if addr, err := os.ReadFile(filepath.Join(b, "address")); err == nil {
			shimSockets = append(shimSockets, strings.TrimPrefix(strings.TrimSpace(string(addr)), "unix://"))
		}
	}
	cgroupRoot := nodeCgroupRoot(index)
	if err := killAll(func() []int { return cgroupProcs(cgroupRoot) }); err != nil {
		errs = append(errs, fmt.Errorf("killing the containers: %w", err))
	}
	if err := killAll(func() []int { return processesMentioning(dir + "/") }); err != nil {
		errs = append(errs, fmt.Errorf("killing the node's processes: %w", err))
	}
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroupRoot(cgroupRoot); err != nil {
		errs = append(errs, err)
	}
	if err := deleteNodeNetwork(index); err != nil {
		errs = append(errs, err)
	}
	logs, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range logs {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, dir+"/") {
			os.Remove(l)
		}
	}
	for _, s := range shimSockets {
		os.Remove(s)
	}
	// Every kubelet serves device-plugin registration at this fixed path,
	// whatever its root directory; once no kubelet answers there (another
	// node's may), the socket is litter.
	if conn, err := net.DialTimeout("unix", kubeletDevicePluginSocket, time.Second); err == nil {
		conn.Close()
	} else {
		os.Remove(kubeletDevicePluginSocket)
	}
	// libcni caches the result of adding each Pod sandbox to a network
	// (the node's, and containerd's loopback) as <network>-<sandbox>-<if>
	// until the sandbox is removed, which a killed sandbox never is.
	for _, id := range containers {
		results, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", "*-"+id+"-*"))
		for _, r := range results {
			os.Remove(r)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// killAll sends SIGKILL to the processes list returns until it returns none,
// or fails after ten seconds.
func killAll(list func() []int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := list()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v survive SIGKILL", pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unmountUnder detaches every mount below dir, deepest first: container
// root filesystems, Pod network namespaces and shm, kubelet's volumes.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		// Mount points escape spaces and the like as octal (\040).
		mp, err := strconv.Unquote(`"` + strings.ReplaceAll(fields[4], `"`, `\"`) + `"`)
		if err != nil {
			mp = fields[4]
		}
		if strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, mp := range points {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// reapStaleNodes tears down the nodes of test processes that died without
// doing so (a test binary killed by its -timeout runs no cleanups): their
// records are no longer locked. A record another process holds is left
// alone.
func reapStaleNodes(t TB) {
	records, _ := filepath.Glob(filepath.Join(os.TempDir(), nodeDirPattern, nodeRecordFile))
	for _, path := range records {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue
		}
		var rec nodeRecord
		data, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(data, &rec)
		}
		if err == nil {
			t.Logf("tearing down the node in %s, left by a test process that ended", filepath.Dir(path))
			err = teardownNode(filepath.Dir(path), rec.Index)
		}
		if err != nil {
			t.Logf("tearing down the node in %s: %v", filepath.Dir(path), err)
		}
		f.Close()
	}
}
