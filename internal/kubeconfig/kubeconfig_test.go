package kubeconfig

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleeet-dev/fleeet/internal/network"
)

// write serialises a kubeconfig whose current context joins the cluster and
// user named "a"; edit may add or change entries.
func write(t *testing.T, edit func(cfg *clientcmdapi.Config)) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["a"] = &clientcmdapi.Cluster{Server: "https://a.example:6443", CertificateAuthorityData: []byte("ca")}
	cfg.AuthInfos["a"] = &clientcmdapi.AuthInfo{Token: "inline-token"}
	cfg.Contexts["a"] = &clientcmdapi.Context{Cluster: "a", AuthInfo: "a"}
	cfg.CurrentContext = "a"
	if edit != nil {
		edit(cfg)
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestLoadRefusesFieldsThatActWithTheManagersPrivileges(t *testing.T) {
	// A file the manager could read, so that an opt-in can be seen to work.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		edit  func(cfg *clientcmdapi.Config)
		field string
		flag  string
		// allow is the opt-in that accepts the field; nil when none does.
		allow *Options
	}{
		"a token file": {
			edit:  func(cfg *clientcmdapi.Config) { cfg.AuthInfos["a"].TokenFile = file },
			field: "users[0].user.tokenFile", flag: FlagFiles, allow: &Options{AllowFiles: true},
		},
		"a client certificate file": {
			edit: func(cfg *clientcmdapi.Config) {
				cfg.AuthInfos["a"].ClientCertificate, cfg.AuthInfos["a"].ClientKeyData = file, []byte("key")
			},
			field: "users[0].user.client-certificate", flag: FlagFiles, allow: &Options{AllowFiles: true},
		},
		"a client key file": {
			edit: func(cfg *clientcmdapi.Config) {
				cfg.AuthInfos["a"].ClientCertificateData, cfg.AuthInfos["a"].ClientKey = []byte("cert"), file
			},
			field: "users[0].user.client-key", flag: FlagFiles, allow: &Options{AllowFiles: true},
		},
		"a certificate authority file": {
			edit: func(cfg *clientcmdapi.Config) {
				cfg.Clusters["a"].CertificateAuthority, cfg.Clusters["a"].CertificateAuthorityData = file, nil
			},
			field: "clusters[0].cluster.certificate-authority", flag: FlagFiles, allow: &Options{AllowFiles: true},
		},
		"an exec plugin": {
			edit: func(cfg *clientcmdapi.Config) {
				cfg.AuthInfos["a"].Token = ""
				cfg.AuthInfos["a"].Exec = &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1",
					Command: "/bin/sh", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
			},
			field: "users[0].user.exec", flag: FlagExec, allow: &Options{AllowExec: true},
		},
		"an auth provider": {
			edit: func(cfg *clientcmdapi.Config) {
				cfg.AuthInfos["a"].AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"}
			},
			field: "users[0].user.auth-provider",
		},
		"skipping TLS verification": {
			edit: func(cfg *clientcmdapi.Config) {
				cfg.Clusters["a"].InsecureSkipTLSVerify, cfg.Clusters["a"].CertificateAuthorityData = true, nil
			},
			field: "clusters[0].cluster.insecure-skip-tls-verify", flag: FlagTLS, allow: &Options{AllowInsecureTLS: true},
		},
		"a proxy": {
			edit:  func(cfg *clientcmdapi.Config) { cfg.Clusters["a"].ProxyURL = "http://proxy.example:3128" },
			field: "clusters[0].cluster.proxy-url", flag: FlagProxy, allow: &Options{AllowProxy: true},
		},
		"a token file of a user the current context does not use": {
			edit: func(cfg *clientcmdapi.Config) {
				cfg.AuthInfos["b"] = &clientcmdapi.AuthInfo{TokenFile: file}
			},
			field: "users[1].user.tokenFile", flag: FlagFiles, allow: &Options{AllowFiles: true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			data := write(t, tc.edit)
			_, err := Load(data, Options{})
			var refused *RefusedError
			g.Expect(errors.As(err, &refused)).To(BeTrue(), "refused: %v", err)
			g.Expect(refused.Field).To(Equal(tc.field))
			g.Expect(refused.Flag).To(Equal(tc.flag))
			g.Expect(err.Error()).To(HavePrefix(tc.field + ": refused: "))
			g.Expect(err.Error()).NotTo(ContainSubstring("inline-token"))
			if tc.allow != nil {
				_, err := Load(data, *tc.allow)
				g.Expect(err).NotTo(HaveOccurred(), "--%s accepts it", tc.flag)
			}
		})
	}
}

func TestLoadBuildsTheClientFromInlineDataOnly(t *testing.T) {
	g := NewWithT(t)
	cfg, err := Load(write(t, func(cfg *clientcmdapi.Config) {
		cfg.AuthInfos["a"].ClientCertificateData = []byte("cert")
		cfg.AuthInfos["a"].ClientKeyData = []byte("key")
		cfg.AuthInfos["a"].Impersonate = "someone"
	}), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Host).To(Equal("https://a.example:6443"))
	g.Expect(cfg.BearerToken).To(Equal("inline-token"))
	g.Expect(cfg.CAData).To(Equal([]byte("ca")))
	g.Expect(cfg.CertData).To(Equal([]byte("cert")))
	g.Expect(cfg.KeyData).To(Equal([]byte("key")))
	g.Expect(cfg.Impersonate.UserName).To(Equal("someone"))
	g.Expect(cfg.BearerTokenFile).To(BeEmpty())
	g.Expect(cfg.ExecProvider).To(BeNil())
	g.Expect(cfg.AuthProvider).To(BeNil())
	g.Expect(cfg.Proxy).To(BeNil())
	g.Expect(cfg.Insecure).To(BeFalse())
}

func TestLoadCarriesOptedInFieldsOnly(t *testing.T) {
	g := NewWithT(t)
	data := write(t, func(cfg *clientcmdapi.Config) {
		cfg.Clusters["a"].ProxyURL = "http://proxy.example:3128"
		cfg.AuthInfos["a"].Token = ""
		cfg.AuthInfos["a"].Exec = &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1",
			Command: "get-token", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
	})
	cfg, err := Load(data, Options{AllowExec: true, AllowProxy: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.ExecProvider).NotTo(BeNil())
	g.Expect(cfg.ExecProvider.Command).To(Equal("get-token"))
	g.Expect(cfg.Proxy).NotTo(BeNil())
}

func TestLoadNamesWhatIsWrongWithoutQuotingTheKubeconfig(t *testing.T) {
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"nothing":        {nil, "empty kubeconfig"},
		"not yaml":       {[]byte("users: [ {name: a, user: {token: inline-token}\n"), "does not parse"},
		"a wrong type":   {[]byte("apiVersion: v1\nkind: Config\nusers:\n- name: a\n  user:\n    client-key-data: inline-token\n"), "does not parse"},
		"no context":     {write(t, func(cfg *clientcmdapi.Config) { cfg.CurrentContext = "" }), "current-context: not set"},
		"a lost context": {write(t, func(cfg *clientcmdapi.Config) { cfg.CurrentContext = "b" }), `current-context: no context named "b"`},
		"a lost cluster": {write(t, func(cfg *clientcmdapi.Config) { cfg.Contexts["a"].Cluster = "b" }),
			`contexts[0].context.cluster: no cluster named "b"`},
		"a lost user": {write(t, func(cfg *clientcmdapi.Config) { cfg.Contexts["a"].AuthInfo = "b" }),
			`contexts[0].context.user: no user named "b"`},
		"no server": {write(t, func(cfg *clientcmdapi.Config) { cfg.Clusters["a"].Server = "" }), "not a usable kubeconfig"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Load(tc.data, Options{})
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(err.Error()).NotTo(ContainSubstring("inline-token"))
		})
	}
}

func TestBindFlagsAreOffByDefault(t *testing.T) {
	g := NewWithT(t)
	var o Options
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	o.BindFlags(fs)
	g.Expect(fs.Parse(nil)).To(Succeed())
	unset := network.Policy{Flag: FlagNetworks}
	g.Expect(o).To(Equal(Options{Networks: unset}))
	g.Expect(fs.Parse([]string{"--" + FlagFiles, "--" + FlagExec, "--" + FlagTLS, "--" + FlagProxy})).To(Succeed())
	g.Expect(o).To(Equal(Options{AllowFiles: true, AllowExec: true, AllowInsecureTLS: true, AllowProxy: true, Networks: unset}))
	g.Expect(fs.Parse([]string{"--" + FlagNetworks + "-deny=", "--" + FlagNetworks + "-allow=10.0.0.0/8"})).To(Succeed())
	g.Expect(o.Networks.Denied).To(BeEmpty())
	g.Expect(o.Networks.Denied).NotTo(BeNil(), "an empty list denies none, rather than the defaults")
	g.Expect(o.Networks.Allowed.String()).To(Equal("10.0.0.0/8"))
}

func TestLoadReadsKubeconfigsAsClientcmdDoes(t *testing.T) {
	g := NewWithT(t)
	// Neither apiVersion nor kind, as hand-written kubeconfigs often are.
	bare := []byte("clusters:\n- name: a\n  cluster:\n    server: https://a.example:6443\n" +
		"users:\n- name: a\n  user:\n    tokenFile: /var/run/secrets/token\n" +
		"contexts:\n- name: a\n  context: {cluster: a, user: a}\ncurrent-context: a\n")
	_, err := Load(bare, Options{})
	g.Expect(err).To(MatchError(HavePrefix("users[0].user.tokenFile: refused")))

	asJSON := []byte(`{"clusters":[{"name":"a","cluster":{"server":"https://a.example:6443"}}],` +
		`"users":[{"name":"a","user":{"token":"inline-token"}}],` +
		`"contexts":[{"name":"a","context":{"cluster":"a","user":"a"}}],"current-context":"a"}`)
	cfg, err := Load(asJSON, Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.BearerToken).To(Equal("inline-token"))
}
