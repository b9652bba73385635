package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The addresses of a cluster that runs Pods. Every node lives in its own
// network namespace on this host, so these only need to be unique per
// cluster, not per host.
const (
	// serviceCIDR is the cluster's --service-cluster-ip-range (envtest's
	// default too); kube-proxy routes its ClusterIPs inside each node.
	serviceCIDR = "10.0.0.0/24"
	// kubernetesServiceIP is the ClusterIP of the default/kubernetes
	// Service, the first address of serviceCIDR: in-cluster clients dial it,
	// so the apiserver's certificate names it.
	kubernetesServiceIP = "10.0.0.1"
)

// nodeClusters holds what WithNodes prepared for an apiserver until
// startCluster, once the apiserver runs, starts the components that nodes
// need cluster-wide.
var nodeClusters sync.Map // *envtest.Environment → *nodeSupport

// nodeSupport is what the nodes of one cluster share.
type nodeSupport struct {
	// servingCAFile is the CA of the apiserver's serving certificate, for
	// in-cluster clients (kube-root-ca.crt).
	servingCAFile string
	// kubeletClientCA signed the certificate the apiserver presents to
	// kubelets; kubelets trust it next to envtest's client CA.
	kubeletClientCA []byte
	// saKeyFile signs ServiceAccount tokens (kube-controller-manager signs
	// the legacy token Secrets with it).
	saKeyFile string

	controllerManager, scheduler *Process

	mu    sync.Mutex
	nodes map[string]bool
}

// WithNodes prepares the apiserver for nodes (Cluster.StartNode) that run
// real Pods, and starts kube-controller-manager and kube-scheduler with it.
//
// Pods must reach the apiserver and the apiserver must reach Pods, so:
//   - the apiserver serves on the host's address (not loopback), which
//     becomes the Cluster's Config.Host: the same URL works from the host
//     and from Pods, such as a fleet-agent Pod dialling a management
//     cluster;
//   - its serving certificate also names the kubernetes Service's ClusterIP
//     (10.0.0.1) and DNS names, for clients using in-cluster config, and it
//     advertises the host's address as that Service's endpoint;
//   - it routes webhook and aggregated-API calls to Services straight to
//     their endpoints (--enable-aggregator-routing): Pod IPs are routed from
//     the host, ClusterIPs only exist inside the nodes;
//   - it authorizes kubelets with the Node authorizer and NodeRestriction,
//     and the ServiceAccount admission plugin (which envtest turns off)
//     gives Pods their ServiceAccount token.
//
// On a machine that cannot run containers, a test starting such a cluster
// is skipped, saying why (see NodesUnsupported).
func WithNodes() ClusterOption {
	return func(env *envtest.Environment, dir string) error {
		if why := NodesUnsupported(); why != "" {
			return &nodesUnsupportedError{why}
		}
		hostIP, err := podReachableHostIP()
		if err != nil {
			return &nodesUnsupportedError{err.Error()}
		}
		api := env.ControlPlane.APIServer
		if api.CertDir == "" {
			return fmt.Errorf("WithNodes needs the apiserver's certificate directory set")
		}
		ns := &nodeSupport{nodes: map[string]bool{}}
		ca, err := newCA("fleeet-testenv-nodes-ca")
		if err != nil {
			return err
		}
		ns.kubeletClientCA = ca.certPEM
		ns.servingCAFile = filepath.Join(api.CertDir, "serving-ca.crt")
		ns.saKeyFile = filepath.Join(api.CertDir, "sa-signer.key")
		serving, err := ca.issue(&x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
				"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(hostIP), net.ParseIP(kubernetesServiceIP)},
		})
		if err != nil {
			return err
		}
		kubeletClient, err := ca.issue(&x509.Certificate{
			// system:masters lets kubelets' webhook authorization admit the
			// apiserver's log, exec and port-forward requests.
			Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		if err != nil {
			return err
		}
		// envtest generates the serving certificate and the ServiceAccount
		// signing key only when apiserver.crt is missing, so this writes
		// both.
		saSigner, err := newCA("fleeet-testenv-service-accounts")
		if err != nil {
			return err
		}
		for name, data := range map[string][]byte{
			"apiserver.crt":      serving.certPEM,
			"apiserver.key":      serving.keyPEM,
			"serving-ca.crt":     ca.certPEM,
			"kubelet-client.crt": kubeletClient.certPEM,
			"kubelet-client.key": kubeletClient.keyPEM,
			"sa-signer.crt":      saSigner.certPEM,
			"sa-signer.key":      saSigner.keyPEM,
		} {
			if err := os.WriteFile(filepath.Join(api.CertDir, name), data, 0o600); err != nil {
				return err
			}
		}
		port, err := freePortOn(hostIP)
		if err != nil {
			return err
		}
		api.SecureServing.CA = ca.certPEM
		api.SecureServing.Address, api.SecureServing.Port = hostIP, port

		args := api.Configure()
		args.Set("advertise-address", hostIP)
		args.Set("service-cluster-ip-range", serviceCIDR)
		args.Set("authorization-mode", "Node,RBAC")
		args.Set("enable-admission-plugins", "NodeRestriction")
		args.Disable("disable-admission-plugins")
		args.Set("enable-aggregator-routing", "true")
		args.Set("kubelet-client-certificate", filepath.Join(api.CertDir, "kubelet-client.crt"))
		args.Set("kubelet-client-key", filepath.Join(api.CertDir, "kubelet-client.key"))
		args.Set("kubelet-preferred-address-types", "InternalIP")
		nodeClusters.Store(env, ns)
		return nil
	}
}

// nodesUnsupportedError says why this machine cannot run nodes; tests that
// meet it are skipped rather than failed.
type nodesUnsupportedError struct{ why string }

func (e *nodesUnsupportedError) Error() string {
	return "this machine cannot run testenv nodes: " + e.why
}

// podReachableHostIP is the host address Pods reach the host at: the IPv4
// address of the interface that holds the default route, or else the first
// global IPv4 address of an interface that is up. Pods leave their node's
// network namespace by its default route, which ends on this host, so any
// of the host's own addresses would do; this one is stable for the test.
func podReachableHostIP() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	var first string
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 || isNodeLink(iface.Name) {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.To4() == nil || !ipn.IP.IsGlobalUnicast() {
				continue
			}
			if iface.Name == defaultRouteInterface() {
				return ipn.IP.String(), nil
			}
			if first == "" {
				first = ipn.IP.String()
			}
		}
	}
	if first == "" {
		return "", fmt.Errorf("the host has no global IPv4 address for Pods to reach the apiserver at")
	}
	return first, nil
}

// defaultRouteInterface names the interface of the IPv4 default route, from
// /proc/net/route, or returns "".
func defaultRouteInterface() string {
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return ""
	}
	var iface, dest string
	for _, line := range strings.Split(string(data), "\n")[1:] {
		if _, err := fmt.Sscan(line, &iface, &dest); err == nil && dest == "00000000" {
			return iface
		}
	}
	return ""
}

// certPair is a PEM certificate and its key; for a CA, the key signs others.
type certPair struct {
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
	certPEM, keyPEM []byte
}

// newCA makes a self-signed CA valid for a day, longer than any test.
func newCA(name string) (*certPair, error) {
	return makeCert(&x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil)
}

// issue signs tmpl's certificate with the CA.
func (ca *certPair) issue(tmpl *x509.Certificate) (*certPair, error) {
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	return makeCert(tmpl, ca)
}

func makeCert(tmpl *x509.Certificate, ca *certPair) (*certPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Minute)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &certPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// nodeControllers are the kube-controller-manager controllers a cluster
// with nodes runs: workloads, namespaces and garbage collection,
// ServiceAccounts with their tokens and kube-root-ca.crt, Service
// endpoints, ResourceQuota usage, and the aggregated ClusterRoles (admin,
// edit, view) charts bind.
var nodeControllers = []string{
	"deployment-controller", "replicaset-controller", "statefulset-controller", "daemonset-controller", "job-controller",
	"namespace-controller", "garbage-collector-controller", "pod-garbage-collector-controller",
	"serviceaccount-controller", "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
	"endpoints-controller", "endpointslice-controller", "endpointslice-mirroring-controller",
	"resourcequota-controller",
	"clusterrole-aggregation-controller",
	// Removes the not-ready taint kubelet registers its node with.
	"node-lifecycle-controller",
}

// startNodeControlPlane starts kube-controller-manager and kube-scheduler
// as cluster administrators, serving their health checks on loopback, with
// their logs in dir.
func (c *Cluster) startNodeControlPlane(dir string) error {
	kcm, err := tool("kube-controller-manager")
	if err != nil {
		return err
	}
	scheduler, err := tool("kube-scheduler")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(name, path string, args ...string) (*Process, error) {
		health, err := freePort()
		if err != nil {
			return nil, err
		}
		certs := filepath.Join(dir, c.Name+"-"+name)
		args = append(args, "--kubeconfig="+c.Kubeconfig, "--leader-elect=false",
			"--bind-address=127.0.0.1", "--secure-port="+health, "--cert-dir="+certs)
		cmd := exec.Command(path, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		p, err := startLogged(c.Name+"-"+name, filepath.Join(dir, c.Name+"-"+name+".log"), cmd)
		if err != nil {
			return nil, err
		}
		if err := p.WaitHTTP(ctx, "https://127.0.0.1:"+health+"/healthz"); err != nil {
			_ = p.Stop(10 * time.Second)
			return nil, err
		}
		return p, nil
	}
	c.nodes.controllerManager, err = start("kube-controller-manager", kcm,
		"--controllers="+strings.Join(nodeControllers, ","),
		"--service-account-private-key-file="+c.nodes.saKeyFile,
		"--root-ca-file="+c.nodes.servingCAFile,
		// How often the node lifecycle controller looks at nodes, so how
		// long a Ready node stays tainted not-ready (default 5 s).
		"--node-monitor-period=1s",
	)
	if err != nil {
		return err
	}
	c.nodes.scheduler, err = start("kube-scheduler", scheduler)
	return err
}

// stop stops the cluster-wide components, printing the end of their logs
// if the tests failed.
func (ns *nodeSupport) stop(failed bool) {
	for _, p := range []*Process{ns.scheduler, ns.controllerManager} {
		if p == nil {
			continue
		}
		// Both exit with an error when terminated, having no leader
		// election to finish.
		if err := p.Stop(30 * time.Second); err != nil && !errors.As(err, new(*exec.ExitError)) {
			fmt.Fprintf(os.Stderr, "%s: %v\n", p.Name, err)
		}
		if failed {
			fmt.Fprintf(os.Stderr, "last lines of %s log (%s):\n%s\n", p.Name, p.LogPath, Tail(p.LogPath, 40))
		}
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (string, error) { return freePortOn("127.0.0.1") }

// freePortOn returns a port of host that was free a moment ago.
func freePortOn(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}
