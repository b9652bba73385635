// Package dashboard is the fleet's web dashboard: `fleetctl dashboard` on a
// user's machine, reading with their kubeconfig, and `fleet-manager
// dashboard --in-cluster`, which the manager chart runs and which authorises
// every caller as themselves (auth.go, session.go, limit.go). It serves
// (server.go) the grid of Remotes × Modules and a page per Module, Remote
// and cell, rendered (views.go) from a watch-fed cache (cache.go) with
// internal/fleetview, the read model fleetctl shows too, and streams each
// page's changes as server-sent events. Its templates, script and style are
// embedded (assets/).
package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// options are the dashboard command's flags.
type options struct {
	address, certFile, keyFile string
	inCluster                  bool
	// exposeCredentials lets the local dashboard, which reads with the
	// caller's own credentials, listen beyond loopback.
	exposeCredentials bool
	// plainHTTP lets the in-cluster dashboard serve without TLS beyond
	// loopback.
	plainHTTP bool
	// trustForwardedFor names clients by X-Forwarded-For.
	trustForwardedFor   bool
	sessionIdle, maxAge time.Duration
}

// NewCommand returns the dashboard command, which connects to the
// management cluster that kube's flags (kubectl's kubeconfig, context and
// namespace flags, registered by the caller) select. fleetctl and
// fleet-manager both serve it as their dashboard subcommand.
func NewCommand(kube genericclioptions.RESTClientGetter) *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the fleet's web dashboard on this machine, reading with your own kubeconfig",
		Long: `Serves the namespace's fleet grid (filter by Remote labels and state), a page per Module
(rollout by stage, each cluster's state, history, events), per Remote (every sync with the cluster's message and the
dependency graph) and per cell (fleetctl why), updated live from watches. Every read is made
with your kubeconfig, so the dashboard shows exactly what you may read; nothing is installed in
the cluster, and the pages fetch nothing from elsewhere. It listens on loopback only: anyone who
reached it would read the fleet as you.

With --in-cluster (how the fleet-manager chart runs it) the dashboard serves every namespace
under /namespaces/NAME/ to callers who present a Kubernetes bearer token (an Authorization
header, or the login form): each request is authenticated with a TokenReview and authorised
with SubjectAccessReviews — the caller must be allowed to list and watch the namespace's
Modules, Remotes and ProxyAssemblages — never with the dashboard's own rights. The login form
opens a short session whose random identifier is the only thing the browser keeps; the token
stays in the dashboard's memory. TokenReviews are rate-limited per client address.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (o.certFile == "") != (o.keyFile == "") {
				return errors.New("--tls-cert-file and --tls-key-file go together")
			}
			if o.sessionIdle <= 0 || o.maxAge <= 0 {
				return errors.New("--session-idle-timeout and --session-max-age must be positive")
			}
			ln, err := net.Listen("tcp", o.address)
			if err != nil {
				return err
			}
			if err := o.mayListenOn(ln.Addr()); err != nil {
				_ = ln.Close()
				return err
			}
			d, err := newServer(cmd.Context(), kube, o)
			if err != nil {
				_ = ln.Close()
				return err
			}
			scheme := "http"
			if o.certFile != "" {
				scheme = "https"
			}
			if o.inCluster {
				fmt.Fprintf(cmd.OutOrStdout(), "serving every namespace's fleet on %s://%s/ to callers with a bearer token\n", scheme, ln.Addr())
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "serving namespace %s's fleet on %s://%s/ (Ctrl-C stops)\n", d.namespace, scheme, ln.Addr())
			}
			srv := &http.Server{Handler: d.handler(ln.Addr()), ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-cmd.Context().Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			}()
			if o.certFile != "" {
				err = srv.ServeTLS(ln, o.certFile, o.keyFile)
			} else {
				err = srv.Serve(ln)
			}
			if !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.address, "address", "localhost:8000", "Address to serve on: loopback only, unless --in-cluster, for the dashboard reads with your credentials")
	f.BoolVar(&o.inCluster, "in-cluster", false, "Serve every namespace to callers with a Kubernetes bearer token, authorised per request with SubjectAccessReview")
	f.StringVar(&o.certFile, "tls-cert-file", "", "PEM certificate to serve HTTPS with (with --tls-key-file)")
	f.StringVar(&o.keyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	f.BoolVar(&o.exposeCredentials, "insecure-expose-my-credentials", false,
		"Without --in-cluster, let --address be beyond loopback: ANYONE who reaches it reads the fleet with YOUR credentials")
	f.BoolVar(&o.plainHTTP, "insecure-plain-http", false,
		"With --in-cluster, serve without TLS beyond loopback: bearer tokens and session cookies then cross the network in the clear")
	f.BoolVar(&o.trustForwardedFor, "trust-forwarded-for", false,
		"With --in-cluster, rate-limit TokenReviews by the last X-Forwarded-For address: only behind a proxy that sets it, for a client can forge it")
	f.DurationVar(&o.sessionIdle, "session-idle-timeout", defaultSessionIdle, "With --in-cluster, how long a login session lasts unused")
	f.DurationVar(&o.maxAge, "session-max-age", defaultSessionMaxAge, "With --in-cluster, how long a login session lasts at most")
	return cmd
}

// mayListenOn refuses an address beyond loopback unless what is served
// there is safe to serve to anyone who reaches it, or the caller said they
// accept the risk.
func (o *options) mayListenOn(addr net.Addr) error {
	if ip := addr.(*net.TCPAddr).IP; ip.IsLoopback() {
		return nil
	}
	switch {
	case !o.inCluster && !o.exposeCredentials:
		return fmt.Errorf("--address %s is beyond loopback: the dashboard reads the fleet with your credentials and would show it to anyone who reaches it; "+
			"use a loopback address, --in-cluster (every caller authenticates), or --insecure-expose-my-credentials to accept the risk", o.address)
	case o.inCluster && o.certFile == "" && !o.plainHTTP:
		return fmt.Errorf("--address %s is beyond loopback without TLS: bearer tokens would cross the network in the clear; "+
			"give --tls-cert-file and --tls-key-file, or --insecure-plain-http to accept the risk", o.address)
	}
	return nil
}
