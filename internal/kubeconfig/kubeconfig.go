// Package kubeconfig loads the kubeconfigs tenants hand to the manager for
// push-mode Remotes. A kubeconfig is the tenant's text, but whoever builds a
// client from it acts with its own privileges: a file path makes the manager
// read its own disk (its ServiceAccount token, sent to a server the tenant
// chooses), an exec plugin or auth-provider makes it run a command. So a
// kubeconfig may carry only inline credentials unless an operator opts in,
// as Flux's controllers do for spec.kubeConfig (fluxcd/pkg/runtime/client:
// ValidateKubeConfig and KubeConfigOptions).
package kubeconfig

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"

	"github.com/fleeet-dev/fleeet/internal/network"
)

// Names of the manager flags that set Options. They follow Flux's
// --insecure-kubeconfig-exec and --insecure-kubeconfig-tls.
const (
	FlagFiles = "insecure-kubeconfig-files"
	FlagExec  = "insecure-kubeconfig-exec"
	FlagTLS   = "insecure-kubeconfig-tls"
	FlagProxy = "insecure-kubeconfig-proxy"
	// FlagNetworks is the prefix of the flags listing the networks the
	// manager connects to, or never connects to, for a push-mode Remote.
	FlagNetworks = "push-networks"
)

// Options are an operator's opt-ins to kubeconfig fields that let whoever
// writes a kubeconfig use the manager's own privileges. All are off by
// default.
type Options struct {
	// AllowFiles accepts paths to files on the manager's disk:
	// users[].user.tokenFile, client-certificate and client-key, and
	// clusters[].cluster.certificate-authority.
	AllowFiles bool
	// AllowExec accepts users[].user.exec credential plugins, which run as
	// commands of the manager's process.
	AllowExec bool
	// AllowInsecureTLS accepts clusters[].cluster.insecure-skip-tls-verify.
	AllowInsecureTLS bool
	// AllowProxy accepts clusters[].cluster.proxy-url, which sends the
	// manager's connections through a host of the tenant's choosing.
	AllowProxy bool
	// Networks are the networks connections to a push Remote's cluster may
	// reach, checked on each dialled address after DNS.
	Networks network.Policy
}

// BindFlags binds the options to the manager's flags.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.AllowFiles, FlagFiles, false,
		"Accept kubeconfigs of push-mode Remotes that name files on the manager's disk (tokenFile, client-certificate, client-key, certificate-authority). Flux refuses them whatever this says.")
	fs.BoolVar(&o.AllowExec, FlagExec, false,
		"Accept kubeconfigs of push-mode Remotes whose user.exec runs a credential plugin in the manager. BootstrapModules also need Flux's --insecure-kubeconfig-exec.")
	fs.BoolVar(&o.AllowInsecureTLS, FlagTLS, false,
		"Accept kubeconfigs of push-mode Remotes that turn off server certificate verification. BootstrapModules also need Flux's --insecure-kubeconfig-tls.")
	fs.BoolVar(&o.AllowProxy, FlagProxy, false,
		"Accept kubeconfigs of push-mode Remotes that send requests through a proxy-url.")
	o.Networks.BindFlags(fs, FlagNetworks, "the addresses the manager connects to for a push-mode Remote, after DNS,", true)
}

// RefusedError says which field of a kubeconfig the manager refuses to use.
type RefusedError struct {
	// Field is the path of the refused field, such as users[0].user.tokenFile.
	Field string
	// Flag is the manager flag that would accept the field; empty when no
	// flag does.
	Flag string

	why string
}

func (e *RefusedError) Error() string {
	if e.Flag == "" {
		return fmt.Sprintf("%s: refused: %s", e.Field, e.why)
	}
	return fmt.Sprintf("%s: refused: %s (the manager accepts it only with --%s)", e.Field, e.why, e.Flag)
}

// Reasons a field is refused; they say what using it would let the tenant do.
const (
	whyFile  = "names a file on the manager's disk; put the content inline (token, client-certificate-data, client-key-data, certificate-authority-data)"
	whyExec  = "would run a command in the manager; put a token or client certificate inline"
	whyAuth  = "auth-provider plugins are not supported; put a token or client certificate inline"
	whyTLS   = "turns off verification of the server's certificate; give certificate-authority-data instead"
	whyProxy = "sends the manager's requests through a proxy"
)

// Load parses a kubeconfig and returns a client configuration for its
// current context built from inline data only. Every cluster and user entry
// is checked, used or not, as Flux checks them; the first refused field
// comes back as a *RefusedError. Errors never quote the kubeconfig, which
// holds credentials.
func Load(data []byte, o Options) (*rest.Config, error) {
	raw, err := parse(data)
	if err != nil {
		return nil, err
	}
	if err := check(raw, o); err != nil {
		return nil, err
	}
	if err := checkCurrentContext(raw); err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	if err := clientcmdlatest.Scheme.Convert(raw, cfg, nil); err != nil {
		return nil, errors.New("not a valid kubeconfig")
	}
	// No ConfigAccess: nothing the client learns is written back to a file.
	in, err := clientcmd.NewNonInteractiveClientConfig(*cfg, cfg.CurrentContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, errors.New("not a usable kubeconfig: the current context gives no server or credentials")
	}
	return sanitize(in, o), nil
}

// parse decodes a kubeconfig in its serialised (v1) form, whose lists keep
// the positions that field paths name.
func parse(data []byte) (*clientcmdv1.Config, error) {
	if len(data) == 0 {
		return nil, errors.New("empty kubeconfig")
	}
	raw := &clientcmdv1.Config{}
	gvk := schema.GroupVersionKind{Version: clientcmdlatest.Version, Kind: "Config"}
	if _, _, err := clientcmdlatest.Codec.Decode(data, &gvk, raw); err != nil {
		// The decoder's errors can quote the document.
		return nil, errors.New("not a valid kubeconfig: it does not parse")
	}
	return raw, nil
}

// check returns a *RefusedError for the first field of raw that o does not
// accept, in document order.
func check(raw *clientcmdv1.Config, o Options) error {
	for i, c := range raw.Clusters {
		at := fmt.Sprintf("clusters[%d].cluster.", i)
		switch {
		case c.Cluster.CertificateAuthority != "" && !o.AllowFiles:
			return &RefusedError{Field: at + "certificate-authority", Flag: FlagFiles, why: whyFile}
		case c.Cluster.InsecureSkipTLSVerify && !o.AllowInsecureTLS:
			return &RefusedError{Field: at + "insecure-skip-tls-verify", Flag: FlagTLS, why: whyTLS}
		case c.Cluster.ProxyURL != "" && !o.AllowProxy:
			return &RefusedError{Field: at + "proxy-url", Flag: FlagProxy, why: whyProxy}
		}
	}
	for i, u := range raw.AuthInfos {
		at := fmt.Sprintf("users[%d].user.", i)
		switch {
		case u.AuthInfo.TokenFile != "" && !o.AllowFiles:
			return &RefusedError{Field: at + "tokenFile", Flag: FlagFiles, why: whyFile}
		case u.AuthInfo.ClientCertificate != "" && !o.AllowFiles:
			return &RefusedError{Field: at + "client-certificate", Flag: FlagFiles, why: whyFile}
		case u.AuthInfo.ClientKey != "" && !o.AllowFiles:
			return &RefusedError{Field: at + "client-key", Flag: FlagFiles, why: whyFile}
		case u.AuthInfo.Exec != nil && !o.AllowExec:
			return &RefusedError{Field: at + "exec", Flag: FlagExec, why: whyExec}
		case u.AuthInfo.AuthProvider != nil:
			// The manager compiles in no auth-provider plugin; the ones
			// client-go still has refresh tokens against URLs in the
			// kubeconfig and write them back.
			return &RefusedError{Field: at + "auth-provider", why: whyAuth}
		}
	}
	return nil
}

// checkCurrentContext says, naming the field, when the current context
// does not lead to a cluster and a user.
func checkCurrentContext(raw *clientcmdv1.Config) error {
	if raw.CurrentContext == "" {
		return errors.New("current-context: not set")
	}
	for i, c := range raw.Contexts {
		if c.Name != raw.CurrentContext {
			continue
		}
		if !hasCluster(raw, c.Context.Cluster) {
			return fmt.Errorf("contexts[%d].context.cluster: no cluster named %q", i, c.Context.Cluster)
		}
		if c.Context.AuthInfo != "" && !hasUser(raw, c.Context.AuthInfo) {
			return fmt.Errorf("contexts[%d].context.user: no user named %q", i, c.Context.AuthInfo)
		}
		return nil
	}
	return fmt.Errorf("current-context: no context named %q", raw.CurrentContext)
}

func hasCluster(raw *clientcmdv1.Config, name string) bool {
	for _, c := range raw.Clusters {
		if c.Name == name {
			return true
		}
	}
	return false
}

func hasUser(raw *clientcmdv1.Config, name string) bool {
	for _, u := range raw.AuthInfos {
		if u.Name == name {
			return true
		}
	}
	return false
}

// sanitize copies into a fresh configuration only what the options allow,
// so that a field Check does not know about carries nothing over. (Flux's
// KubeConfig does the same.)
func sanitize(in *rest.Config, o Options) *rest.Config {
	out := &rest.Config{
		Host:               in.Host,
		APIPath:            in.APIPath,
		DisableCompression: in.DisableCompression,
		BearerToken:        in.BearerToken,
		Username:           in.Username,
		Password:           in.Password,
		// Impersonation asks the tenant's own cluster to act as someone
		// else with the tenant's own credential; the manager gives nothing.
		Impersonate: in.Impersonate,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: in.ServerName,
			CAData:     in.CAData,
			CertData:   in.CertData,
			KeyData:    in.KeyData,
		},
	}
	if o.AllowFiles {
		out.BearerTokenFile = in.BearerTokenFile
		out.CAFile, out.CertFile, out.KeyFile = in.CAFile, in.CertFile, in.KeyFile
	}
	if o.AllowExec {
		out.ExecProvider = in.ExecProvider
	}
	if o.AllowInsecureTLS {
		out.Insecure = in.Insecure
	}
	if o.AllowProxy {
		out.Proxy = in.Proxy
	}
	networks := o.Networks
	networks.Flag = FlagNetworks
	out.Dial = networks.Dialer()
	return out
}
