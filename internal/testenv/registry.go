package testenv

import (
	"io"
	"log"
	"strings"

	"github.com/google/go-containerregistry/pkg/registry"
)

// NewPodReachableRegistry starts an OCI registry (go-containerregistry's,
// in memory, plain HTTP) at the host address Pods on testenv nodes reach,
// stopped when the test ends, and returns its host:port. Nodes pull from it
// once told to with Node.PullFrom.
func NewPodReachableRegistry(t TB) string {
	t.Helper()
	host, err := podReachableHostIP()
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, host, registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	return strings.TrimPrefix(srv.URL, "http://")
}
