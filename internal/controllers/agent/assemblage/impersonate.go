package assemblage

import (
	"fmt"
	gosync "sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServiceAccountReaders hands out uncached readers that act as a downstream
// ServiceAccount, the way Flux's controllers act as the ServiceAccount a
// Kustomization or HelmRelease names. Sync bindings are read through them,
// so a binding reads exactly what its tenant's syncs could read, never what
// the agent itself may. Each account's reader is built once and shared.
type ServiceAccountReaders struct {
	config *rest.Config
	scheme *runtime.Scheme
	mapper meta.RESTMapper

	mu      gosync.Mutex
	readers map[types.NamespacedName]client.Reader
}

// NewServiceAccountReaders builds readers from the agent's own configuration,
// which must allow impersonating the accounts (the chart grants `impersonate`
// on each tenant's ServiceAccount by name).
func NewServiceAccountReaders(config *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper) *ServiceAccountReaders {
	return &ServiceAccountReaders{config: config, scheme: scheme, mapper: mapper, readers: map[types.NamespacedName]client.Reader{}}
}

// For returns a reader acting as ServiceAccount namespace/name. The
// apiserver gives an impersonated ServiceAccount the groups its own tokens
// carry (system:serviceaccounts, system:serviceaccounts:<namespace>).
func (s *ServiceAccountReaders) For(namespace, name string) (client.Reader, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.readers[key]; ok {
		return r, nil
	}
	cfg := rest.CopyConfig(s.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + name}
	c, err := client.New(cfg, client.Options{Scheme: s.scheme, Mapper: s.mapper})
	if err != nil {
		return nil, fmt.Errorf("building a client acting as ServiceAccount %s: %w", key, err)
	}
	s.readers[key] = c
	return c, nil
}
