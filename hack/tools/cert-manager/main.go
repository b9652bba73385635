// Command cert-manager runs cert-manager's controller and its cainjector in
// one process, built from the pinned github.com/cert-manager/cert-manager
// module, so tests can run the fleet-manager chart's default path (a
// self-signed Issuer, a Certificate, the CA injected into the webhook
// configuration) against the real thing.
//
// It exists because cert-manager's own main packages live in modules of
// their own (…/controller-binary, …/cainjector-binary) that the Go module
// proxy fleeet builds from does not serve, while the controllers and the
// injectors are libraries of the main module. This is the wiring of
// cert-manager's cmd/controller and cmd/cainjector, cut down to what a test
// cluster needs: no leader election (one replica), no metrics or profiling
// servers, no cert-manager webhook (the CRDs' schemas still apply), and the
// controllers of issuers that need no outside service: ACME, Vault and
// Venafi would call servers a test machine cannot reach.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	ingresses "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/ingresses"
	crapprover "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	certificatesmetrics "github.com/cert-manager/cert-manager/pkg/controller/certificates/metrics"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
	"golang.org/x/sync/errgroup"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	// The issuer types the issuers controllers can make ready.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers are cert-manager's default controllers (its
// DefaultEnabledControllers) without those of ACME, Vault and Venafi.
var controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	certificatesmetrics.ControllerName,
	ingresses.ControllerName,
	crapprover.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

func main() {
	// A flag set of our own: controller-runtime defines --kubeconfig on
	// the global one.
	flags := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig of the cluster to run against")
	clusterResourceNamespace := flags.String("cluster-resource-namespace", "kube-system",
		"namespace of the Secrets that ClusterIssuers refer to")
	healthAddr := flags.String("health-addr", "127.0.0.1:9403",
		"address serving /readyz: 200 once the controllers and the cainjector have synced their caches")
	klog.InitFlags(flags)
	_ = flags.Parse(os.Args[1:])
	logf.InitLogs()
	ctrl.SetLogger(klog.NewKlogr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *clusterResourceNamespace, *healthAddr); err != nil {
		klog.ErrorS(err, "cert-manager stopped")
		logf.FlushLogs()
		os.Exit(1)
	}
}

// run serves readiness and runs the controllers and the cainjector until ctx
// ends or one of them fails.
func run(ctx context.Context, kubeconfig, clusterResourceNamespace, healthAddr string) error {
	g, ctx := errgroup.WithContext(ctx)
	var controllersSynced, injectorSynced atomic.Bool
	health := &http.Server{Addr: healthAddr, ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(
		func(w http.ResponseWriter, _ *http.Request) {
			if !controllersSynced.Load() || !injectorSynced.Load() {
				http.Error(w, "caches not synced", http.StatusServiceUnavailable)
			}
		})}
	g.Go(func() error {
		if err := health.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		return health.Close()
	})
	g.Go(func() error { return runControllers(ctx, kubeconfig, clusterResourceNamespace, &controllersSynced) })
	g.Go(func() error { return runCAInjector(ctx, kubeconfig, &injectorSynced) })
	return g.Wait()
}

// runControllers runs the controllers, with cert-manager's default options,
// as cmd/controller does.
func runControllers(ctx context.Context, kubeconfig, clusterResourceNamespace string, synced *atomic.Bool) error {
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: clusterResourceNamespace},
		CertificateOptions: controller.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	for _, name := range controllers {
		c, err := controller.Known()[name](factory)
		if err != nil {
			return fmt.Errorf("building controller %s: %w", name, err)
		}
		g.Go(func() error { return c.Run(5, ctx) })
	}
	// The controllers asked for their informers while being built; start
	// them all now.
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	g.Go(func() error {
		for informer, ok := range base.SharedInformerFactory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("syncing the cache of %v", informer)
			}
		}
		for informer, ok := range base.KubeSharedInformerFactory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("syncing the cache of %s", informer)
			}
		}
		synced.Store(true)
		return nil
	})
	return g.Wait()
}

// runCAInjector runs the injectors of every kind, as cmd/cainjector does by
// default: webhook configurations, APIServices and CRDs get the CA of the
// Certificate or Secret their annotation names.
func runCAInjector(ctx context.Context, kubeconfig string, synced *atomic.Bool) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(util.RestConfigWithUserAgent(config, "cainjector"), ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// cainjector reads Secrets directly rather than caching them all.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return err
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	}); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return mgr.Start(ctx) })
	g.Go(func() error {
		// The injectors' watches start with them; GetInformer returns
		// once the cache they share is synced.
		select {
		case <-mgr.Elected():
		case <-ctx.Done():
			return nil
		}
		for _, kind := range []client.Object{
			&admissionregistrationv1.MutatingWebhookConfiguration{},
			&admissionregistrationv1.ValidatingWebhookConfiguration{},
			&apireg.APIService{},
			&apiext.CustomResourceDefinition{},
			&cmapi.Certificate{},
		} {
			if _, err := mgr.GetCache().GetInformer(ctx, kind); err != nil {
				return fmt.Errorf("syncing the cache of %T: %w", kind, err)
			}
		}
		synced.Store(true)
		return nil
	})
	return g.Wait()
}
